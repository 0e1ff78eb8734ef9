package turn

import (
	"context"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	turnpb "github.com/tabcast/tabcast/plugins/turn/proto"
	"google.golang.org/grpc"
)

// Plugin is the go-plugin adapter for TURN plugins.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Relay
}

// PluginSets is what a TURN plugin main passes to plugins.Serve.
func PluginSets(impl Relay) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = plugin.PluginSet{plugins.KindTurn: &Plugin{Impl: impl}}
	}
	return out
}

func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.Register(s, p.Impl)
	turnpb.RegisterTurnServer(s, &server{impl: p.Impl})
	return nil
}

func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// Client is the host's view of a TURN plugin.
type Client struct {
	*base.Client
	pb turnpb.TurnClient
}

var _ Relay = (*Client)(nil)

// NewClient wraps a connection to a TURN plugin.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{Client: base.NewClient(conn), pb: turnpb.NewTurnClient(conn)}
}

func scopeToPB(s Scope) *turnpb.Scope {
	return &turnpb.Scope{User: s.User, Session: s.Session, Peer: s.Peer, Generation: int64(s.Generation)}
}

func scopeFromPB(s *turnpb.Scope) Scope {
	return Scope{User: s.GetUser(), Session: s.GetSession(), Peer: s.GetPeer(), Generation: int(s.GetGeneration())}
}

func (c *Client) MintCredential(ctx context.Context, scope Scope, ttl time.Duration) (Credential, error) {
	// Round up so that a sub-second ttl is not sent as 0.
	secs := int64((ttl + time.Second - 1) / time.Second)
	r, err := c.pb.MintCredential(ctx, &turnpb.CredentialRequest{Scope: scopeToPB(scope), TtlSeconds: secs})
	if err != nil {
		return Credential{}, err
	}
	return Credential{Username: r.GetUsername(), Password: r.GetPassword(), URLs: r.GetUrls(), Expires: time.Unix(r.GetExpiresUnix(), 0)}, nil
}

func (c *Client) Revoke(ctx context.Context, scope Scope) (Revoked, error) {
	r, err := c.pb.Revoke(ctx, &turnpb.RevokeRequest{Scope: scopeToPB(scope)})
	if err != nil {
		return Revoked{}, err
	}
	return Revoked{Credentials: int(r.GetCredentials()), Allocations: int(r.GetAllocations())}, nil
}

func (c *Client) Status(ctx context.Context) (Stats, error) {
	r, err := c.pb.Status(ctx, &turnpb.StatusRequest{})
	if err != nil {
		return Stats{}, err
	}
	return Stats{
		AllocationsActive: int(r.GetAllocationsActive()), AllocationsTotal: r.GetAllocationsTotal(),
		AuthFailures: r.GetAuthFailures(), PermissionDenies: r.GetPermissionDenies(), QuotaRejects: r.GetQuotaRejects(),
		RelayedBytes: r.GetRelayedBytes(), RelayedPackets: r.GetRelayedPackets(),
		PolicyDrops: r.GetPolicyDrops(), BandwidthDrops: r.GetBandwidthDrops(), CredentialsLive: int(r.GetCredentialsLive()),
	}, nil
}

type server struct {
	turnpb.UnimplementedTurnServer
	impl Relay
}

func (s *server) MintCredential(ctx context.Context, r *turnpb.CredentialRequest) (*turnpb.Credential, error) {
	c, err := s.impl.MintCredential(ctx, scopeFromPB(r.GetScope()), time.Duration(r.GetTtlSeconds())*time.Second)
	if err != nil {
		return nil, err
	}
	return &turnpb.Credential{Username: c.Username, Password: c.Password, Urls: c.URLs, ExpiresUnix: c.Expires.Unix()}, nil
}

func (s *server) Revoke(ctx context.Context, r *turnpb.RevokeRequest) (*turnpb.RevokeResponse, error) {
	out, err := s.impl.Revoke(ctx, scopeFromPB(r.GetScope()))
	if err != nil {
		return nil, err
	}
	return &turnpb.RevokeResponse{Credentials: int64(out.Credentials), Allocations: int64(out.Allocations)}, nil
}

func (s *server) Status(ctx context.Context, _ *turnpb.StatusRequest) (*turnpb.Stats, error) {
	st, err := s.impl.Status(ctx)
	if err != nil {
		return nil, err
	}
	return &turnpb.Stats{
		AllocationsActive: int64(st.AllocationsActive), AllocationsTotal: st.AllocationsTotal,
		AuthFailures: st.AuthFailures, PermissionDenies: st.PermissionDenies, QuotaRejects: st.QuotaRejects,
		RelayedBytes: st.RelayedBytes, RelayedPackets: st.RelayedPackets,
		PolicyDrops: st.PolicyDrops, BandwidthDrops: st.BandwidthDrops, CredentialsLive: int64(st.CredentialsLive),
	}, nil
}
