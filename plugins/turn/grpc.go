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

func (c *Client) MintCredential(ctx context.Context, scope string, ttl time.Duration) (Credential, error) {
	r, err := c.pb.MintCredential(ctx, &turnpb.CredentialRequest{Scope: scope, TtlSeconds: int64(ttl / time.Second)})
	if err != nil {
		return Credential{}, err
	}
	return Credential{Username: r.GetUsername(), Password: r.GetPassword(), URLs: r.GetUrls(), Expires: time.Unix(r.GetExpiresUnix(), 0)}, nil
}

type server struct {
	turnpb.UnimplementedTurnServer
	impl Relay
}

func (s *server) MintCredential(ctx context.Context, r *turnpb.CredentialRequest) (*turnpb.Credential, error) {
	c, err := s.impl.MintCredential(ctx, r.GetScope(), time.Duration(r.GetTtlSeconds())*time.Second)
	if err != nil {
		return nil, err
	}
	return &turnpb.Credential{Username: c.Username, Password: c.Password, Urls: c.URLs, ExpiresUnix: c.Expires.Unix()}, nil
}
