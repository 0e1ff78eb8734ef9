package capture

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	capturepb "github.com/tabcast/tabcast/plugins/capture/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Plugin is the go-plugin adapter for capture plugins.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Capturer
}

// PluginSets is what a capture plugin main passes to plugins.Serve.
func PluginSets(impl Capturer) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = plugin.PluginSet{plugins.KindCapture: &Plugin{Impl: impl}}
	}
	return out
}

func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.Register(s, p.Impl)
	capturepb.RegisterCaptureServer(s, &server{impl: p.Impl})
	return nil
}

func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// Client is the host's view of a capture plugin.
type Client struct {
	*base.Client
	pb capturepb.CaptureClient
}

var (
	_ Capturer   = (*Client)(nil)
	_ Controller = (*Client)(nil)
)

// NewClient wraps a connection to a capture plugin.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{Client: base.NewClient(conn), pb: capturepb.NewCaptureClient(conn)}
}

func (c *Client) ChromiumFlags(ctx context.Context) ([]string, error) {
	r, err := c.pb.ChromiumFlags(ctx, &capturepb.FlagsRequest{})
	if err != nil {
		return nil, err
	}
	return r.GetFlags(), nil
}

func (c *Client) Stream(ctx context.Context, t Target, send func(Frame) error) error {
	st, err := c.pb.Stream(ctx, &capturepb.StreamRequest{Target: &capturepb.Target{
		SessionId: t.SessionID, BrowserWsUrl: t.BrowserWSURL, TargetId: t.TargetID,
		Width: int32(t.Width), Height: int32(t.Height),
	}})
	if err != nil {
		return err
	}
	for {
		f, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(Frame{
			Format: Format(f.GetFormat()), Data: f.GetData(),
			CaptureTime: time.Unix(0, f.GetCaptureUnixNano()),
			Width:       int(f.GetWidth()), Height: int(f.GetHeight()),
			Seq: f.GetSeq(), Dropped: f.GetDropped(), Keyframe: f.GetKeyframe(),
		}); err != nil {
			return err
		}
	}
}

// Control forwards c to the plugin's running stream of sessionID. It fails
// with codes.Unimplemented (IsUnimplemented) when the plugin takes no
// controls.
func (c *Client) Control(ctx context.Context, sessionID string, sc StreamControl) error {
	_, err := c.pb.Control(ctx, &capturepb.ControlRequest{
		SessionId: sessionID, Keyframe: sc.Keyframe,
		MaxBitrateKbps: int32(sc.MaxBitrateKbps), MaxFps: int32(sc.MaxFPS),
	})
	return err
}

// IsUnimplemented reports an error of Control against a plugin that takes
// no stream controls.
func IsUnimplemented(err error) bool {
	return status.Code(err) == codes.Unimplemented
}

// AlreadyStreaming is the error a Capturer returns from Stream for a session
// it still streams (its previous stream has not ended yet); it crosses the
// plugin boundary as codes.AlreadyExists.
func AlreadyStreaming(sessionID string) error {
	return status.Errorf(codes.AlreadyExists, "session %q is already streaming", sessionID)
}

// IsAlreadyStreaming reports the error of AlreadyStreaming: worth a retry
// once the previous stream has ended, not a capture failure.
func IsAlreadyStreaming(err error) bool {
	return status.Code(err) == codes.AlreadyExists
}

type server struct {
	capturepb.UnimplementedCaptureServer
	impl Capturer
}

func (s *server) ChromiumFlags(ctx context.Context, _ *capturepb.FlagsRequest) (*capturepb.FlagsResponse, error) {
	f, err := s.impl.ChromiumFlags(ctx)
	if err != nil {
		return nil, err
	}
	return &capturepb.FlagsResponse{Flags: f}, nil
}

func (s *server) Stream(r *capturepb.StreamRequest, st grpc.ServerStreamingServer[capturepb.Frame]) error {
	t := r.GetTarget()
	return s.impl.Stream(st.Context(), Target{
		SessionID: t.GetSessionId(), BrowserWSURL: t.GetBrowserWsUrl(), TargetID: t.GetTargetId(),
		Width: int(t.GetWidth()), Height: int(t.GetHeight()),
	}, func(f Frame) error {
		return st.Send(&capturepb.Frame{
			Format: capturepb.FrameFormat(f.Format), Data: f.Data,
			CaptureUnixNano: f.CaptureTime.UnixNano(),
			Width:           int32(f.Width), Height: int32(f.Height),
			Seq: f.Seq, Dropped: f.Dropped, Keyframe: f.Keyframe,
		})
	})
}

func (s *server) Control(ctx context.Context, r *capturepb.ControlRequest) (*capturepb.ControlResponse, error) {
	c, ok := s.impl.(Controller)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "capture plugin takes no stream controls")
	}
	if err := c.Control(ctx, r.GetSessionId(), StreamControl{
		Keyframe: r.GetKeyframe(), MaxBitrateKbps: int(r.GetMaxBitrateKbps()), MaxFPS: int(r.GetMaxFps()),
	}); err != nil {
		return nil, err
	}
	return &capturepb.ControlResponse{}, nil
}
