package session

import "testing"

func TestViewCorrection(t *testing.T) {
	for _, c := range []struct {
		w, h, fw, fh, dw, dh int
	}{
		{1280, 720, 1280, 720, 0, 0},
		{1280, 720, 1279, 721, 0, 0},   // rounding
		{1280, 720, 1280, 576, 0, 144}, // the browser's UI takes room
		{1280, 720, 1138, 720, 0, -90}, // too tall: scaled down to fit, real height 810
		{1280, 720, 1000, 600, 280, 120},
		{1280, 720, 0, 0, 0, 0},      // size not known
		{1280, 720, 1400, 800, 0, 0}, // larger than the limits: not from a capture
	} {
		dw, dh := viewCorrection(c.w, c.h, c.fw, c.fh)
		if dw != c.dw || dh != c.dh {
			t.Errorf("viewCorrection(%d,%d, %d,%d) = %+d,%+d; want %+d,%+d", c.w, c.h, c.fw, c.fh, dw, dh, c.dw, c.dh)
		}
	}
}
