package ffenc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// FFmpeg encoder names.
const (
	EncoderX264  = "libx264"
	EncoderVPX   = "libvpx"
	EncoderVAAPI = "h264_vaapi"
	EncoderNVENC = "h264_nvenc"
	// EncoderVAAPIVP8 is VP8 on VAAPI, where the driver offers it (Intel
	// up to Ice Lake; most others have no VP8 encoder).
	EncoderVAAPIVP8 = "vp8_vaapi"
)

// isVAAPI says whether name is a VAAPI encoder (fed NV12 uploads through
// the cgo shim, on a render node).
func isVAAPI(name string) bool { return name == EncoderVAAPI || name == EncoderVAAPIVP8 }

// timeBase is the encoders' time base: the 90 kHz RTP video clock, fine
// enough for capture timestamps of frames that arrive at a variable rate.
const timeBase = 90000

// settings is everything that shapes one encoder instance.
type settings struct {
	encoder       string
	width, height int
	fps           int
	bitrateKbps   int
	keyint        int // frames
	threads       int
	h264Preset    string
	vp8CPUUsed    int
	device        string // VAAPI render node
	// The test-only fake hardware encoder's behaviour (see FakeHWEnv).
	fakeFailAfter int
	fakeOKFile    string
}

func (s settings) codec() string {
	if s.encoder == EncoderVPX || s.encoder == EncoderVAAPIVP8 {
		return encoder.CodecVP8
	}
	return encoder.CodecH264
}

func (s settings) hardware() bool {
	return isVAAPI(s.encoder) || s.encoder == EncoderNVENC || s.encoder == EncoderFakeHW
}

// software is s on the software encoder of its codec, for a stream whose
// hardware encoder failed: same size, rate, frame rate and keyframe interval.
func (s settings) software() settings {
	if s.codec() == encoder.CodecVP8 {
		s.encoder = EncoderVPX
	} else {
		s.encoder = EncoderX264
	}
	s.device, s.fakeFailAfter, s.fakeOKFile = "", 0, ""
	return s
}

// pixelFormat is what the encoder is fed: limited-range 4:2:0 for every
// software encoder. The screencast's JPEGs are full range (yuvj420p) and
// libx264 could take them as they are (no swscale pass, 25-30 % cheaper, the
// ffmpeg CLI's default), signalling full range in the VUI. We convert
// instead: decoders that ignore the VUI range flag, such as OpenH264 (what
// Firefox uses for H.264 WebRTC), would show such a stream with crushed
// blacks and clipped whites, and VP8 has no range flag at all. nvenc takes
// the same yuv420p; VAAPI gets NV12 to upload.
func (s settings) pixelFormat() astiav.PixelFormat {
	if isVAAPI(s.encoder) {
		return astiav.PixelFormatNv12
	}
	return astiav.PixelFormatYuv420P
}

// signalling says what the pictures are in the H.264 VUI: limited range
// with the BT.601 matrix of JPEG, so that receivers do not guess BT.709 for
// HD sizes and tint the picture.
var signalling = []option{{"color_range", "tv"}, {"colorspace", "smpte170m"}}

type option struct{ key, value string }

// options are the encoder's AVOptions. They go through the options
// dictionary because some typed setters are ignored (libx264 ignores the
// profile field; only profile=baseline gives constrained baseline).
func (s settings) options() []option {
	bps := strconv.Itoa(s.bitrateKbps * 1000)
	g := strconv.Itoa(s.keyint)
	switch s.encoder {
	case EncoderX264, EncoderFakeHW:
		return append([]option{
			{"preset", s.h264Preset},
			// zerolatency: no lookahead, no frame-thread delay, and
			// force-cfr: rate control spends bitrate/fps on each frame
			// whatever the pts spacing (libvpx budgets by pts instead).
			{"tune", "zerolatency"},
			{"profile", "baseline"},
			{"bf", "0"},
			{"g", g},
			// Keyframes only at the interval or on request: scene cuts
			// would make the bitrate unpredictable.
			{"sc_threshold", "0"},
			{"forced-idr", "1"},
			{"b", bps},
			{"maxrate", bps},
			{"bufsize", bps}, // one second of VBV
			{"threads", strconv.Itoa(s.threads)},
			// SPS/PPS before every IDR (also the default without the
			// global-header flag), Annex-B start codes.
			{"x264-params", "repeat-headers=1:annexb=1"},
		}, signalling...)
	case EncoderVPX:
		return []option{
			{"deadline", "realtime"},
			{"cpu-used", strconv.Itoa(s.vp8CPUUsed)},
			{"lag-in-frames", "0"},
			{"error-resilient", "default"},
			{"g", g},
			// minrate = maxrate = b selects libvpx's CBR end usage.
			{"b", bps},
			{"minrate", bps},
			{"maxrate", bps},
			{"bufsize", bps}, // 1000 ms buffer
			{"rc_init_occupancy", strconv.Itoa(s.bitrateKbps * 500)}, // 500 ms
			{"undershoot-pct", "100"},
			{"overshoot-pct", "15"},
			{"max-intra-rate", "300"}, // a keyframe at most 3 frames' budget
			{"threads", strconv.Itoa(s.threads)},
			// libvpx takes each frame's duration from ticks_per_frame:
			// one nominal frame in the 90 kHz time base, or the first
			// frame would be budgeted as 1/90000 s long.
			{"ticks_per_frame", strconv.Itoa(timeBase / s.fps)},
		}
	case EncoderNVENC:
		return append([]option{
			{"preset", "p1"},
			{"tune", "ull"},
			{"zerolatency", "1"},
			{"delay", "0"},
			{"rc", "cbr"},
			{"profile", "baseline"},
			{"bf", "0"},
			{"g", g},
			{"forced-idr", "1"},
			{"b", bps},
			{"maxrate", bps},
			{"bufsize", bps},
		}, signalling...)
	case EncoderVAAPI:
		return append([]option{
			{"profile", "constrained_baseline"},
			{"rc_mode", "CBR"},
			{"async_depth", "1"},
			{"bf", "0"},
			{"g", g},
			{"b", bps},
			{"maxrate", bps},
			{"bufsize", bps},
		}, signalling...)
	case EncoderVAAPIVP8:
		// VP8 has no range flag: the NV12 upload is limited range already.
		return []option{
			{"rc_mode", "CBR"},
			{"async_depth", "1"},
			{"g", g},
			{"b", bps},
			{"maxrate", bps},
			{"bufsize", bps},
		}
	}
	return nil
}

// videoEncoder is one open encoder. encode sends f (nil flushes) and emits
// every packet that is ready.
type videoEncoder interface {
	encode(f *astiav.Frame, pts int64, key bool, emit func(data []byte, key bool)) error
	close()
}

// openEncoder opens the encoder s names. unused lists options the encoder
// did not consume (they had no effect).
func openEncoder(s settings) (enc videoEncoder, unused []string, err error) {
	if isVAAPI(s.encoder) {
		var b strings.Builder
		for i, o := range s.options() {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(o.key + "=" + o.value)
		}
		v, err := openVAAPI(s.encoder, s.device, s.width, s.height, s.fps, timeBase, b.String())
		return v, nil, err
	}
	if s.encoder == EncoderFakeHW {
		return openFakeHW(s)
	}
	return openAV(s)
}

// avEncoder is an encoder driven through astiav (software and nvenc).
type avEncoder struct {
	cc  *astiav.CodecContext
	pkt *astiav.Packet
}

func openAV(s settings) (*avEncoder, []string, error) {
	codec := astiav.FindEncoderByName(s.encoder)
	if codec == nil {
		return nil, nil, fmt.Errorf("encoder %s not in this FFmpeg build", s.encoder)
	}
	cc := astiav.AllocCodecContext(codec)
	if cc == nil {
		return nil, nil, errors.New("allocating the codec context failed")
	}
	cc.SetWidth(s.width)
	cc.SetHeight(s.height)
	cc.SetPixelFormat(s.pixelFormat())
	cc.SetTimeBase(astiav.NewRational(1, timeBase))
	// Rate control budgets per frame from the nominal rate; the pts carry
	// the real, variable spacing.
	cc.SetFramerate(astiav.NewRational(s.fps, 1))
	cc.SetSampleAspectRatio(astiav.NewRational(1, 1))
	d := astiav.NewDictionary()
	defer d.Free()
	for _, o := range s.options() {
		if err := d.Set(o.key, o.value, 0); err != nil {
			cc.Free()
			return nil, nil, fmt.Errorf("option %s: %w", o.key, err)
		}
	}
	if err := cc.Open(codec, d); err != nil {
		cc.Free()
		return nil, nil, fmt.Errorf("opening %s: %w", s.encoder, err)
	}
	var unused []string
	for e := d.Get("", nil, astiav.NewDictionaryFlags(astiav.DictionaryFlagIgnoreSuffix)); e != nil; e = d.Get("", e, astiav.NewDictionaryFlags(astiav.DictionaryFlagIgnoreSuffix)) {
		unused = append(unused, e.Key())
	}
	return &avEncoder{cc: cc, pkt: astiav.AllocPacket()}, unused, nil
}

func (e *avEncoder) encode(f *astiav.Frame, pts int64, key bool, emit func(data []byte, key bool)) error {
	if f != nil {
		f.SetPts(pts)
		// Always set: the mjpeg decoder marks every picture I, which the
		// encoders would take as a keyframe request.
		if key {
			f.SetPictureType(astiav.PictureTypeI)
		} else {
			f.SetPictureType(astiav.PictureTypeNone)
		}
		f.SetKeyFrame(key)
	}
	if err := e.cc.SendFrame(f); err != nil {
		return fmt.Errorf("sending a frame: %w", err)
	}
	for {
		err := e.cc.ReceivePacket(e.pkt)
		if errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receiving a packet: %w", err)
		}
		emit(e.pkt.Data(), astiav.PacketFlags(e.pkt.Flags()).Has(astiav.PacketFlagKey))
		e.pkt.Unref()
	}
}

func (e *avEncoder) close() {
	e.pkt.Free()
	e.cc.Free()
}
