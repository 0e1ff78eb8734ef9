package base

import (
	"context"
	"time"

	basepb "github.com/tabcast/tabcast/plugins/base/proto"
	"google.golang.org/grpc"
)

// Client calls the base service of a plugin. Kind-specific clients embed it.
type Client struct {
	pb basepb.BaseClient
}

// NewClient wraps a connection to a plugin.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{pb: basepb.NewBaseClient(conn)}
}

func (c *Client) Info(ctx context.Context) (Info, error) {
	r, err := c.pb.Info(ctx, &basepb.Empty{})
	if err != nil {
		return Info{}, err
	}
	return Info{
		Name: r.GetName(), Version: r.GetVersion(), Kind: r.GetKind(),
		APIVersion: int(r.GetApiVersion()), Capabilities: r.GetCapabilities(),
	}, nil
}

func (c *Client) ConfigSchema(ctx context.Context) (Schema, error) {
	r, err := c.pb.ConfigSchema(ctx, &basepb.Empty{})
	if err != nil {
		return Schema{}, err
	}
	return Schema{JSONSchema: r.GetJsonSchema(), DefaultsJSON: r.GetDefaultsJson()}, nil
}

func (c *Client) SetConfig(ctx context.Context, configJSON []byte) error {
	r, err := c.pb.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: configJSON})
	if err != nil {
		return err
	}
	if !r.GetOk() {
		return &ConfigError{Key: r.GetKey(), Message: r.GetMessage()}
	}
	return nil
}

func (c *Client) Ping(ctx context.Context) error {
	_, err := c.pb.Ping(ctx, &basepb.Empty{})
	return err
}

func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.pb.Shutdown(ctx, &basepb.Empty{})
	return err
}

// server adapts a Plugin to the generated base service.
type server struct {
	basepb.UnimplementedBaseServer
	impl Plugin
}

// Register serves impl's base service on s. Kind packages call it from
// their go-plugin adapters.
func Register(s *grpc.Server, impl Plugin) {
	basepb.RegisterBaseServer(s, &server{impl: impl})
}

func (s *server) Info(ctx context.Context, _ *basepb.Empty) (*basepb.InfoResponse, error) {
	i, err := s.impl.Info(ctx)
	if err != nil {
		return nil, err
	}
	return &basepb.InfoResponse{
		Name: i.Name, Version: i.Version, Kind: i.Kind,
		ApiVersion: int32(i.APIVersion), Capabilities: i.Capabilities,
	}, nil
}

func (s *server) ConfigSchema(ctx context.Context, _ *basepb.Empty) (*basepb.ConfigSchemaResponse, error) {
	sc, err := s.impl.ConfigSchema(ctx)
	if err != nil {
		return nil, err
	}
	return &basepb.ConfigSchemaResponse{JsonSchema: sc.JSONSchema, DefaultsJson: sc.DefaultsJSON}, nil
}

func (s *server) SetConfig(ctx context.Context, r *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	err := s.impl.SetConfig(ctx, r.GetConfigJson())
	if err == nil {
		return &basepb.SetConfigResponse{Ok: true}, nil
	}
	if ce, ok := AsConfigError(err); ok {
		return &basepb.SetConfigResponse{Key: ce.Key, Message: ce.Message}, nil
	}
	return &basepb.SetConfigResponse{Message: err.Error()}, nil
}

func (s *server) Ping(ctx context.Context, _ *basepb.Empty) (*basepb.PingResponse, error) {
	if err := s.impl.Ping(ctx); err != nil {
		return nil, err
	}
	return &basepb.PingResponse{UnixNano: time.Now().UnixNano()}, nil
}

func (s *server) Shutdown(ctx context.Context, _ *basepb.Empty) (*basepb.Empty, error) {
	return &basepb.Empty{}, s.impl.Shutdown(ctx)
}
