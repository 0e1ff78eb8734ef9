package errcode

import "net/http"

// Every stable code, each defined once. Grouped by where it is first met;
// a code means the same wherever it appears.
const (
	// Arguments and requests.
	InvalidArgument  = "invalid_argument" // a bad argument, option, selector or ref syntax
	TooLarge         = "too_large"        // a message, argument or body over its limit
	MethodNotAllowed = "method_not_allowed"
	Unsupported      = "unsupported"   // known, but this appliance cannot do it
	NotSupported     = "not_supported" // a backend or plugin lacks the feature
	UnknownCommand   = "unknown_command"
	Conflict         = "conflict"
	NotFound         = "not_found" // no such session, element, tab or endpoint
	Timeout          = "timeout"
	Internal         = "internal"

	// Actions and the dispatcher (docs/protocol.md, "Actions").
	UnknownKind       = "unknown_kind" // action.kind is not a client action
	SeqGap            = "seq_gap"
	StalePage         = "stale_page"
	StaleGeneration   = "stale_generation" // a connection or producer generation that is not the current one, or the producer ended
	UnknownProducer   = "unknown_producer"
	QueueFull         = "queue_full"
	RateLimited       = "rate_limited"
	OutcomeUnknown    = "outcome_unknown"
	NavigationBlocked = "navigation_blocked"
	ShortcutBlocked   = "shortcut_blocked"
	NotAllowed        = "not_allowed"
	NoDialog          = "no_dialog"
	Failed            = "failed" // the page, not the appliance, failed
	SessionClosed     = "session_closed"

	// DataChannel envelopes (core/wire).
	BadVersion     = "bad_version"     // first byte is not the envelope version
	BadEnvelope    = "bad_envelope"    // empty, not a JSON object, or not valid JSON
	WrongChannel   = "wrong_channel"   // a control kind on pointer or vice versa, or anything sent on state
	BadField       = "bad_field"       // a field is missing, of the wrong type or out of range
	WrongIdentity  = "wrong_identity"  // browserSessionId, peerId or producerId is not this connection's
	NotInteractive = "not_interactive" // this connection holds no producer
	ViewOnly       = "view_only"       // the viewer may watch this session, not act on it

	// Signaling frames (core/signaling).
	BadJSON           = "bad_json"
	UnknownType       = "unknown_type"
	SDPTooLarge       = "sdp_too_large"
	TooManyCandidates = "too_many_candidates"
	BadState          = "bad_state"
	SessionNotFound   = "session_not_found"
	SessionEnded      = "session_ended"
	PeerFailed        = "peer_failed"
	SlowConsumer      = "slow_consumer"
	ShuttingDown      = "shutting_down"

	// Sessions.
	CapacityExceeded   = "capacity_exceeded"
	BrowserUnavailable = "browser_unavailable"
	NotReady           = "not_ready"
	CodecUnsupported   = "codec_unsupported"
	ProfileInUse       = "profile_in_use"
	BadProxy           = "bad_proxy"

	// Agents and element refs (core/agent, core/snapshot).
	StaleRef       = "stale_ref"   // the ref no longer names a live element: take a new snapshot
	Ambiguous      = "ambiguous"   // more than one element matched
	NotVisible     = "not_visible" // the element has no box on screen
	Obscured       = "obscured"    // another element is on top of the click point
	HumanInControl = "human_in_control"
	EvalDisabled   = "eval_disabled"
	TooManyTabs    = "too_many_tabs" // tabs new over the session's limit

	// The CDP endpoint (core/httpapi, core/cdpproxy).
	CDPDisabled        = "cdp_disabled"         // agent.cdp is off
	TooManyConnections = "too_many_connections" // the session's CDP connections are at agent.cdpMaxConnections

	// Authentication and authorization.
	PermissionDenied       = "permission_denied" // who are you? (or access withdrawn while connected)
	Forbidden              = "forbidden"         // you may not
	InvalidCredentials     = "invalid_credentials"
	CSRF                   = "csrf_failed"
	OriginDenied           = "origin_denied"
	PasswordChangeRequired = "password_change_required"
	WeakPassword           = "weak_password"
	AuthUnavailable        = "auth_unavailable"
	HostDenied             = "host_denied"   // auth.mode none and a host other than the loopback one (DNS rebinding)
	AuthDisabled           = "auth_disabled" // the call needs authentication, which auth.mode none turned off

	// Encoder plugins (the SDK's encoder.Error codes, mapped at the edge).
	BadFrame     = "bad_frame" // the stream stays usable
	OpenFailed   = "open_failed"
	EncodeFailed = "encode_failed"
	BadRequest   = "bad_request"
)

// entry is what an edge needs to know about a code.
type entry struct {
	status      int  // HTTP status of an answer carrying the code
	recoverable bool // retrying (or recovering as the hint says) can help
}

// table is the one place a code's HTTP status and recoverability are
// decided. A code seen only on WebSocket or DataChannel frames still has
// a status, so any edge can carry it.
var table = map[string]entry{
	InvalidArgument:  {http.StatusUnprocessableEntity, false},
	TooLarge:         {http.StatusUnprocessableEntity, false},
	MethodNotAllowed: {http.StatusMethodNotAllowed, false},
	Unsupported:      {http.StatusUnprocessableEntity, false},
	NotSupported:     {http.StatusNotImplemented, false},
	UnknownCommand:   {http.StatusUnprocessableEntity, false},
	Conflict:         {http.StatusConflict, true},
	NotFound:         {http.StatusNotFound, true},
	Timeout:          {http.StatusGatewayTimeout, true},
	Internal:         {http.StatusInternalServerError, true},

	UnknownKind:       {http.StatusUnprocessableEntity, false},
	SeqGap:            {http.StatusConflict, true},
	StalePage:         {http.StatusConflict, true},
	StaleGeneration:   {http.StatusGone, true},
	UnknownProducer:   {http.StatusConflict, true},
	QueueFull:         {http.StatusTooManyRequests, true},
	RateLimited:       {http.StatusTooManyRequests, true},
	OutcomeUnknown:    {http.StatusGatewayTimeout, true},
	NavigationBlocked: {http.StatusForbidden, false},
	ShortcutBlocked:   {http.StatusForbidden, false},
	NotAllowed:        {http.StatusForbidden, false},
	NoDialog:          {http.StatusConflict, true},
	Failed:            {http.StatusBadGateway, true},
	SessionClosed:     {http.StatusGone, true},

	BadVersion:     {http.StatusBadRequest, false},
	BadEnvelope:    {http.StatusBadRequest, false},
	WrongChannel:   {http.StatusBadRequest, false},
	BadField:       {http.StatusBadRequest, false},
	WrongIdentity:  {http.StatusForbidden, false},
	NotInteractive: {http.StatusForbidden, false},
	ViewOnly:       {http.StatusForbidden, false},

	BadJSON:           {http.StatusBadRequest, false},
	UnknownType:       {http.StatusBadRequest, false},
	SDPTooLarge:       {http.StatusRequestEntityTooLarge, false},
	TooManyCandidates: {http.StatusBadRequest, false},
	BadState:          {http.StatusConflict, false},
	SessionNotFound:   {http.StatusNotFound, false},
	SessionEnded:      {http.StatusGone, false},
	PeerFailed:        {http.StatusBadGateway, true},
	SlowConsumer:      {http.StatusServiceUnavailable, true},
	ShuttingDown:      {http.StatusServiceUnavailable, true},

	CapacityExceeded:   {http.StatusTooManyRequests, true},
	BrowserUnavailable: {http.StatusServiceUnavailable, true},
	NotReady:           {http.StatusConflict, true},
	CodecUnsupported:   {http.StatusUnprocessableEntity, false},
	ProfileInUse:       {http.StatusConflict, true},
	BadProxy:           {http.StatusUnprocessableEntity, false},

	StaleRef:       {http.StatusConflict, true},
	Ambiguous:      {http.StatusConflict, true},
	NotVisible:     {http.StatusConflict, true},
	Obscured:       {http.StatusConflict, true},
	HumanInControl: {http.StatusConflict, true},
	EvalDisabled:   {http.StatusForbidden, false},
	TooManyTabs:    {http.StatusTooManyRequests, true},

	CDPDisabled:        {http.StatusForbidden, false},
	TooManyConnections: {http.StatusTooManyRequests, true},

	PermissionDenied:       {http.StatusUnauthorized, false},
	Forbidden:              {http.StatusForbidden, false},
	InvalidCredentials:     {http.StatusUnauthorized, true},
	CSRF:                   {http.StatusForbidden, false},
	OriginDenied:           {http.StatusForbidden, false},
	PasswordChangeRequired: {http.StatusForbidden, false},
	WeakPassword:           {http.StatusUnprocessableEntity, true},
	AuthUnavailable:        {http.StatusServiceUnavailable, true},
	HostDenied:             {http.StatusForbidden, false},
	AuthDisabled:           {http.StatusConflict, false},

	BadFrame:     {http.StatusUnprocessableEntity, true},
	OpenFailed:   {http.StatusBadGateway, false},
	EncodeFailed: {http.StatusBadGateway, true},
	BadRequest:   {http.StatusBadRequest, false},
}
