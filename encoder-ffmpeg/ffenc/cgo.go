package ffenc

// The few FFmpeg calls go-astiav v0.16.0 lacks. The VAAPI encoder lives here
// whole because it needs hw_frames_ctx on its AVCodecContext, which astiav
// does not expose: this file owns that context explicitly instead of reading
// astiav's struct layouts.

/*
#cgo pkg-config: libavcodec libavutil
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
#include <libavutil/hwcontext.h>
#include <libavutil/dict.h>
#include <stdlib.h>

static int tc_frame_make_writable(void *f) { return av_frame_make_writable((AVFrame *)f); }

typedef struct {
	AVCodecContext *cc;
	AVBufferRef *dev;
	AVFrame *hw;
	AVPacket *pkt;
} tc_hwenc;

// tc_hwenc_open opens a VAAPI encoder fed with NV12 software frames. *out is
// set as soon as it is allocated: the caller frees it even on error.
static int tc_hwenc_open(tc_hwenc **out, const char *name, const char *device,
	int w, int h, int fps, int tb_den, const char *opts) {
	int ret;
	tc_hwenc *e = av_mallocz(sizeof(*e));
	*out = e;
	if (!e) return AVERROR(ENOMEM);
	const AVCodec *codec = avcodec_find_encoder_by_name(name);
	if (!codec) return AVERROR_ENCODER_NOT_FOUND;
	if ((ret = av_hwdevice_ctx_create(&e->dev, AV_HWDEVICE_TYPE_VAAPI, device, NULL, 0)) < 0) return ret;
	if (!(e->cc = avcodec_alloc_context3(codec))) return AVERROR(ENOMEM);
	e->cc->width = w;
	e->cc->height = h;
	e->cc->time_base = (AVRational){1, tb_den};
	e->cc->framerate = (AVRational){fps, 1};
	e->cc->pix_fmt = AV_PIX_FMT_VAAPI;
	AVBufferRef *frames = av_hwframe_ctx_alloc(e->dev);
	if (!frames) return AVERROR(ENOMEM);
	AVHWFramesContext *fc = (AVHWFramesContext *)frames->data;
	fc->format = AV_PIX_FMT_VAAPI;
	fc->sw_format = AV_PIX_FMT_NV12;
	fc->width = w;
	fc->height = h;
	fc->initial_pool_size = 4;
	if ((ret = av_hwframe_ctx_init(frames)) < 0) {
		av_buffer_unref(&frames);
		return ret;
	}
	e->cc->hw_frames_ctx = frames; // the codec context owns it from here
	AVDictionary *d = NULL;
	if (opts && *opts && (ret = av_dict_parse_string(&d, opts, "=", ":", 0)) < 0) {
		av_dict_free(&d);
		return ret;
	}
	ret = avcodec_open2(e->cc, codec, &d);
	av_dict_free(&d);
	if (ret < 0) return ret;
	if (!(e->hw = av_frame_alloc()) || !(e->pkt = av_packet_alloc())) return AVERROR(ENOMEM);
	return 0;
}

// tc_hwenc_send uploads sw (NV12) and sends it; sw == NULL flushes.
static int tc_hwenc_send(tc_hwenc *e, void *sw, int64_t pts, int key) {
	int ret;
	if (!sw) return avcodec_send_frame(e->cc, NULL);
	av_frame_unref(e->hw);
	if ((ret = av_hwframe_get_buffer(e->cc->hw_frames_ctx, e->hw, 0)) < 0) return ret;
	if ((ret = av_hwframe_transfer_data(e->hw, (AVFrame *)sw, 0)) < 0) return ret;
	e->hw->pts = pts;
	e->hw->pict_type = key ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
	ret = avcodec_send_frame(e->cc, e->hw);
	av_frame_unref(e->hw);
	return ret;
}

// tc_hwenc_receive returns the next packet's size (data via tc_hwenc_data,
// valid until the next call) or a negative AVERROR.
static int tc_hwenc_receive(tc_hwenc *e, int *key) {
	av_packet_unref(e->pkt);
	int ret = avcodec_receive_packet(e->cc, e->pkt);
	if (ret < 0) return ret;
	*key = (e->pkt->flags & AV_PKT_FLAG_KEY) != 0;
	return e->pkt->size;
}

static void *tc_hwenc_data(tc_hwenc *e) { return e->pkt->data; }

static void tc_hwenc_free(tc_hwenc *e) {
	if (!e) return;
	av_packet_free(&e->pkt);
	av_frame_free(&e->hw);
	avcodec_free_context(&e->cc); // also unrefs hw_frames_ctx
	av_buffer_unref(&e->dev);
	av_free(e);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/asticode/go-astiav"
)

// makeWritable is av_frame_make_writable: a reused frame may still be
// referenced by the encoder, and writing into it would change a picture the
// encoder has not consumed yet.
func makeWritable(f *astiav.Frame) error {
	if ret := C.tc_frame_make_writable(f.UnsafePointer()); ret < 0 {
		return astiav.Error(ret)
	}
	return nil
}

// vaapiEncoder is a VAAPI H.264 encoder fed with NV12 software frames.
type vaapiEncoder struct {
	e *C.tc_hwenc
}

func openVAAPI(name, device string, w, h, fps, tbDen int, opts string) (*vaapiEncoder, error) {
	cname, cdev, copts := C.CString(name), C.CString(device), C.CString(opts)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cdev))
	defer C.free(unsafe.Pointer(copts))
	var e *C.tc_hwenc
	if ret := C.tc_hwenc_open(&e, cname, cdev, C.int(w), C.int(h), C.int(fps), C.int(tbDen), copts); ret < 0 {
		C.tc_hwenc_free(e)
		return nil, fmt.Errorf("opening %s on %s: %w", name, device, astiav.Error(ret))
	}
	return &vaapiEncoder{e: e}, nil
}

func (v *vaapiEncoder) encode(f *astiav.Frame, pts int64, key bool, emit func(data []byte, key bool)) error {
	var fp unsafe.Pointer
	if f != nil {
		fp = f.UnsafePointer()
	}
	k := C.int(0)
	if key {
		k = 1
	}
	if ret := C.tc_hwenc_send(v.e, fp, C.int64_t(pts), k); ret < 0 {
		return fmt.Errorf("sending a frame: %w", astiav.Error(ret))
	}
	for {
		var isKey C.int
		n := C.tc_hwenc_receive(v.e, &isKey)
		if n < 0 {
			if err := astiav.Error(n); errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
				return nil
			}
			return fmt.Errorf("receiving a packet: %w", astiav.Error(n))
		}
		emit(C.GoBytes(C.tc_hwenc_data(v.e), n), isKey != 0)
	}
}

func (v *vaapiEncoder) close() {
	C.tc_hwenc_free(v.e)
	v.e = nil
}
