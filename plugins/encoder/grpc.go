package encoder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	encoderpb "github.com/tabcast/tabcast/plugins/encoder/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Plugin is the go-plugin adapter for encoder plugins.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Encoder
}

// PluginSets is what an encoder plugin main passes to plugins.Serve.
func PluginSets(impl Encoder) map[int]plugin.PluginSet {
	out := map[int]plugin.PluginSet{}
	for _, v := range APIVersions {
		out[v] = plugin.PluginSet{plugins.KindEncoder: &Plugin{Impl: impl}}
	}
	return out
}

func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.Register(s, p.Impl)
	encoderpb.RegisterEncoderServer(s, &server{impl: p.Impl})
	return nil
}

func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewClient(c), nil
}

// Client is the host's view of an encoder plugin.
type Client struct {
	*base.Client
	pb encoderpb.EncoderClient
}

var _ Encoder = (*Client)(nil)

// NewClient wraps a connection to an encoder plugin.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{Client: base.NewClient(conn), pb: encoderpb.NewEncoderClient(conn)}
}

func (c *Client) Capabilities(ctx context.Context) ([]Probe, error) {
	r, err := c.pb.Capabilities(ctx, &encoderpb.CapabilitiesRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]Probe, 0, len(r.GetProbes()))
	for _, p := range r.GetProbes() {
		out = append(out, Probe{
			Encoder: p.GetEncoder(), Codec: p.GetCodec(), Hardware: p.GetHardware(),
			OK: p.GetOk(), Error: p.GetError(), Duration: time.Duration(p.GetDurationMs()) * time.Millisecond,
		})
	}
	return out, nil
}

// Open starts an encode stream. The stream lives until Close or ctx ends.
func (c *Client) Open(ctx context.Context, p OpenParams) (Stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := c.pb.Encode(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	cs := &clientStream{st: st, cancel: cancel}
	if err := st.Send(&encoderpb.EncodeIn{Msg: &encoderpb.EncodeIn_Open{Open: &encoderpb.OpenParams{
		Codec: p.Codec, Width: int32(p.Width), Height: int32(p.Height), Fps: int32(p.FPS),
		BitrateKbps: int32(p.BitrateKbps), KeyframeIntervalMs: int32(p.KeyframeInterval / time.Millisecond),
		Hardware: p.Hardware,
	}}}); err != nil {
		cs.Close()
		return nil, err
	}
	out, err := st.Recv()
	if err != nil {
		cs.Close()
		return nil, err
	}
	switch m := out.GetMsg().(type) {
	case *encoderpb.EncodeOut_Opened:
		o := openedFromPB(m.Opened)
		cs.opened.Store(&o)
		return cs, nil
	case *encoderpb.EncodeOut_Error:
		cs.Close()
		return nil, &Error{Code: m.Error.GetCode(), Message: m.Error.GetMessage()}
	default:
		cs.Close()
		return nil, &Error{Code: "protocol", Message: fmt.Sprintf("unexpected first message %T", m)}
	}
}

type clientStream struct {
	st     grpc.BidiStreamingClient[encoderpb.EncodeIn, encoderpb.EncodeOut]
	cancel context.CancelFunc
	// opened changes under Encode while others may read it (stats).
	opened atomic.Pointer[Opened]
}

func (s *clientStream) Opened() Opened { return *s.opened.Load() }

func openedFromPB(o *encoderpb.Opened) Opened {
	return Opened{
		Encoder: o.GetEncoder(), Codec: o.GetCodec(), Hardware: o.GetHardware(),
		FallbackFrom: o.GetFallbackFrom(), FallbackReason: o.GetFallbackReason(),
	}
}

func openedToPB(o Opened) *encoderpb.Opened {
	return &encoderpb.Opened{
		Encoder: o.Encoder, Codec: o.Codec, Hardware: o.Hardware,
		FallbackFrom: o.FallbackFrom, FallbackReason: o.FallbackReason,
	}
}

func (s *clientStream) Encode(f InputFrame) (Result, error) {
	if err := s.st.Send(&encoderpb.EncodeIn{Msg: &encoderpb.EncodeIn_Frame{Frame: &encoderpb.InputFrame{
		Jpeg: f.JPEG, CaptureUnixNano: f.CaptureTime.UnixNano(), ForceKeyframe: f.ForceKeyframe, Seq: f.Seq,
	}}}); err != nil {
		return Result{}, err
	}
	out, err := s.st.Recv()
	if err != nil {
		return Result{}, err
	}
	switch m := out.GetMsg().(type) {
	case *encoderpb.EncodeOut_Result:
		r := Result{Seq: m.Result.GetSeq(), EncodeTime: time.Duration(m.Result.GetEncodeNs())}
		for _, smp := range m.Result.GetSamples() {
			r.Samples = append(r.Samples, Sample{
				Data: smp.GetData(), Keyframe: smp.GetKeyframe(),
				Duration:    time.Duration(smp.GetDurationNs()),
				CaptureTime: time.Unix(0, smp.GetCaptureUnixNano()),
			})
		}
		if m.Result.GetOpened() != nil {
			o := openedFromPB(m.Result.GetOpened())
			r.Opened = &o
			s.opened.Store(&o)
		}
		return r, nil
	case *encoderpb.EncodeOut_Error:
		return Result{}, &Error{Code: m.Error.GetCode(), Message: m.Error.GetMessage()}
	default:
		return Result{}, &Error{Code: "protocol", Message: fmt.Sprintf("unexpected message %T", m)}
	}
}

func (s *clientStream) Control(c Control) error {
	return s.st.Send(&encoderpb.EncodeIn{Msg: &encoderpb.EncodeIn_Control{Control: &encoderpb.Control{
		BitrateKbps: int32(c.BitrateKbps), Fps: int32(c.FPS),
	}}})
}

func (s *clientStream) Close() error {
	err := s.st.CloseSend()
	s.cancel()
	return err
}

type server struct {
	encoderpb.UnimplementedEncoderServer
	impl Encoder
}

func (s *server) Capabilities(ctx context.Context, _ *encoderpb.CapabilitiesRequest) (*encoderpb.CapabilitiesResponse, error) {
	probes, err := s.impl.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	r := &encoderpb.CapabilitiesResponse{}
	for _, p := range probes {
		r.Probes = append(r.Probes, &encoderpb.Probe{
			Encoder: p.Encoder, Codec: p.Codec, Hardware: p.Hardware, Ok: p.OK,
			Error: p.Error, DurationMs: p.Duration.Milliseconds(),
		})
	}
	return r, nil
}

func sendErr(st grpc.BidiStreamingServer[encoderpb.EncodeIn, encoderpb.EncodeOut], err error) error {
	e := &Error{Code: "encode_failed", Message: err.Error()}
	var ee *Error
	if errors.As(err, &ee) {
		e = ee
	}
	return st.Send(&encoderpb.EncodeOut{Msg: &encoderpb.EncodeOut_Error{Error: &encoderpb.EncodeError{Code: e.Code, Message: e.Message}}})
}

func (s *server) Encode(st grpc.BidiStreamingServer[encoderpb.EncodeIn, encoderpb.EncodeOut]) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	op := first.GetOpen()
	if op == nil {
		return sendErr(st, &Error{Code: "bad_request", Message: "the first message must be open"})
	}
	stream, err := s.impl.Open(st.Context(), OpenParams{
		Codec: op.GetCodec(), Width: int(op.GetWidth()), Height: int(op.GetHeight()), FPS: int(op.GetFps()),
		BitrateKbps: int(op.GetBitrateKbps()), KeyframeInterval: time.Duration(op.GetKeyframeIntervalMs()) * time.Millisecond,
		Hardware: op.GetHardware(),
	})
	if err != nil {
		var ee *Error
		if !errors.As(err, &ee) {
			err = &Error{Code: "open_failed", Message: err.Error()}
		}
		return sendErr(st, err)
	}
	defer stream.Close()
	if err := st.Send(&encoderpb.EncodeOut{Msg: &encoderpb.EncodeOut_Opened{Opened: openedToPB(stream.Opened())}}); err != nil {
		return err
	}
	for {
		in, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch m := in.GetMsg().(type) {
		case *encoderpb.EncodeIn_Frame:
			res, err := stream.Encode(InputFrame{
				JPEG: m.Frame.GetJpeg(), CaptureTime: time.Unix(0, m.Frame.GetCaptureUnixNano()),
				ForceKeyframe: m.Frame.GetForceKeyframe(), Seq: m.Frame.GetSeq(),
			})
			if err != nil {
				if err := sendErr(st, err); err != nil {
					return err
				}
				continue
			}
			out := &encoderpb.Result{Seq: res.Seq, EncodeNs: int64(res.EncodeTime)}
			if res.Opened != nil {
				out.Opened = openedToPB(*res.Opened)
			}
			for _, smp := range res.Samples {
				out.Samples = append(out.Samples, &encoderpb.Sample{
					Data: smp.Data, Keyframe: smp.Keyframe, DurationNs: int64(smp.Duration),
					CaptureUnixNano: smp.CaptureTime.UnixNano(),
				})
			}
			if err := st.Send(&encoderpb.EncodeOut{Msg: &encoderpb.EncodeOut_Result{Result: out}}); err != nil {
				return err
			}
		case *encoderpb.EncodeIn_Control:
			// Controls get no answer (each frame gets exactly one), so a
			// refused control is the plugin's to log; the stream goes on.
			_ = stream.Control(Control{BitrateKbps: int(m.Control.GetBitrateKbps()), FPS: int(m.Control.GetFps())})
		default:
			return status.Error(codes.InvalidArgument, "encoder: open may be sent only once")
		}
	}
}
