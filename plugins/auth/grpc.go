package auth

import (
	"context"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	authpb "github.com/tabcast/tabcast/plugins/auth/proto"
	"github.com/tabcast/tabcast/plugins/base"
	"google.golang.org/grpc"
)

// Plugin is the go-plugin adapter for auth plugins.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Authenticator
}

// PluginSets is what an auth plugin main passes to plugins.Serve.
func PluginSets(impl Authenticator) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = plugin.PluginSet{plugins.KindAuth: &Plugin{Impl: impl}}
	}
	return out
}

func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.Register(s, p.Impl)
	authpb.RegisterAuthServer(s, &server{impl: p.Impl})
	return nil
}

func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// Client is the host's view of an auth plugin.
type Client struct {
	*base.Client
	pb authpb.AuthClient
}

var _ Authenticator = (*Client)(nil)

// NewClient wraps a connection to an auth plugin.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{Client: base.NewClient(conn), pb: authpb.NewAuthClient(conn)}
}

func (c *Client) Authenticate(ctx context.Context, r Request) (Result, error) {
	out, err := c.pb.Authenticate(ctx, &authpb.AuthenticateRequest{Username: r.Username, Password: r.Password, SourceIp: r.SourceIP})
	if err != nil {
		return Result{}, err
	}
	return fromPB(out), nil
}

func (c *Client) ChangePassword(ctx context.Context, r ChangeRequest) (Result, error) {
	out, err := c.pb.ChangePassword(ctx, &authpb.ChangePasswordRequest{
		Username: r.Username, OldPassword: r.OldPassword, NewPassword: r.NewPassword, SourceIp: r.SourceIP,
	})
	if err != nil {
		return Result{}, err
	}
	return fromPB(out), nil
}

func fromPB(out *authpb.AuthenticateResponse) Result {
	return Result{
		OK: out.GetOk(), UserID: out.GetUserId(), Roles: out.GetRoles(),
		MustChangePassword: out.GetMustChangePassword(), ErrorCode: out.GetErrorCode(),
		RetryAfter: time.Duration(out.GetRetryAfterMs()) * time.Millisecond,
	}
}

func toPB(res Result) *authpb.AuthenticateResponse {
	return &authpb.AuthenticateResponse{
		Ok: res.OK, UserId: res.UserID, Roles: res.Roles, MustChangePassword: res.MustChangePassword,
		ErrorCode: res.ErrorCode, RetryAfterMs: res.RetryAfter.Milliseconds(),
	}
}

type server struct {
	authpb.UnimplementedAuthServer
	impl Authenticator
}

func (s *server) Authenticate(ctx context.Context, r *authpb.AuthenticateRequest) (*authpb.AuthenticateResponse, error) {
	res, err := s.impl.Authenticate(ctx, Request{Username: r.GetUsername(), Password: r.GetPassword(), SourceIP: r.GetSourceIp()})
	if err != nil {
		return nil, err
	}
	return toPB(res), nil
}

func (s *server) ChangePassword(ctx context.Context, r *authpb.ChangePasswordRequest) (*authpb.AuthenticateResponse, error) {
	res, err := s.impl.ChangePassword(ctx, ChangeRequest{
		Username: r.GetUsername(), OldPassword: r.GetOldPassword(), NewPassword: r.GetNewPassword(), SourceIP: r.GetSourceIp(),
	})
	if err != nil {
		return nil, err
	}
	return toPB(res), nil
}
