package ffenc

import (
	"errors"
	"fmt"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// decoded is what libavcodec made of an encoded stream.
type decoded struct {
	frames        int
	width, height int
	colorRange    astiav.ColorRange
	colorSpace    astiav.ColorSpace
	// lumaAvg is the mean Y of the last frame.
	lumaAvg float64
}

// decode decodes samples with libavcodec's own decoder (as a viewer's
// browser would, independently of the encoder under test). each, if not
// nil, gets every decoded frame's luma plane (width × height bytes, a copy)
// in output order.
func decode(codec string, samples []encoder.Sample, each func(luma []byte, w, h int)) (decoded, error) {
	id := astiav.CodecIDH264
	if codec == encoder.CodecVP8 {
		id = astiav.CodecIDVp8
	}
	var d decoded
	c := astiav.FindDecoder(id)
	if c == nil {
		return d, fmt.Errorf("no %s decoder in this FFmpeg", codec)
	}
	cc := astiav.AllocCodecContext(c)
	defer cc.Free()
	cc.SetThreadCount(1)
	if err := cc.Open(c, nil); err != nil {
		return d, fmt.Errorf("opening the %s decoder: %w", codec, err)
	}
	pkt := astiav.AllocPacket()
	defer pkt.Free()
	f := astiav.AllocFrame()
	defer f.Free()
	drain := func() error {
		for {
			err := cc.ReceiveFrame(f)
			if errors.Is(err, astiav.ErrEagain) || errors.Is(err, astiav.ErrEof) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("decoding: %w", err)
			}
			d.frames++
			d.width, d.height, d.colorRange, d.colorSpace = f.Width(), f.Height(), f.ColorRange(), cc.ColorSpace()
			n, err := f.ImageBufferSize(1)
			if err != nil {
				f.Unref()
				return fmt.Errorf("decoded frame %d: %w", d.frames, err)
			}
			buf := make([]byte, n)
			if _, err := f.ImageCopyToBuffer(buf, 1); err != nil {
				f.Unref()
				return fmt.Errorf("decoded frame %d: %w", d.frames, err)
			}
			// Planar 4:2:0 (what both decoders output): Y comes first.
			luma := buf[:f.Width()*f.Height()]
			sum := 0
			for _, v := range luma {
				sum += int(v)
			}
			d.lumaAvg = float64(sum) / float64(len(luma))
			if each != nil {
				each(luma, f.Width(), f.Height())
			}
			f.Unref()
		}
	}
	for i, s := range samples {
		if err := pkt.FromData(append(append([]byte(nil), s.Data...), make([]byte, inputPadding)...)); err != nil {
			return d, err
		}
		pkt.SetSize(len(s.Data))
		err := cc.SendPacket(pkt)
		pkt.Unref()
		if err != nil {
			return d, fmt.Errorf("sample %d: %w", i, err)
		}
		if err := drain(); err != nil {
			return d, err
		}
	}
	if err := cc.SendPacket(nil); err != nil {
		return d, err
	}
	return d, drain()
}
