package cdpws

import (
	"bytes"
	"context"
	"fmt"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tabcast/tabcast/internal/testenv"
	"go.uber.org/goleak"
)

// squarePage flips a square between red and blue on mousedown.
const squarePage = `<!doctype html><style>html,body{margin:0;height:100%;background:#fff}
#sq{position:absolute;left:0;top:0;width:400px;height:300px;background:rgb(255,0,0)}</style>
<div id=sq></div><script>let on=false;
sq.addEventListener('mousedown',()=>{on=!on;sq.style.background=on?'rgb(0,0,255)':'rgb(255,0,0)'})</script>`

// centre reads the square's centre colour from a JPEG frame.
func centre(t *testing.T, b []byte) (r, g, bl uint32, w, h int) {
	t.Helper()
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("frame is not a JPEG: %v", err)
	}
	r, g, bl, _ = img.At(200, 150).RGBA()
	return r >> 8, g >> 8, bl >> 8, img.Bounds().Dx(), img.Bounds().Dy()
}

func TestScreencastOverWebSocket(t *testing.T) {
	testenv.NeedsChromium(t) // Start launches one
	defer goleak.VerifyNone(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, squarePage) }))
	defer page.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Start(ctx, Options{PageURL: page.URL, Width: 640, Height: 360})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	resp, err := http.Get(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `<canvas id=c width=640 height=360>`) || !strings.Contains(string(body), "/ws") {
		t.Fatalf("viewer page lacks its canvas or socket:\n%s", body)
	}

	conn, _, err := websocket.Dial(ctx, strings.Replace(s.URL, "http://", "ws://", 1)+"ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(8 << 20)
	// waitColour reads frames until the square's centre is near want.
	waitColour := func(want [3]uint32) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		var last [3]uint32
		for {
			typ, b, err := conn.Read(rctx)
			if err != nil {
				t.Fatalf("waiting for colour %v (last %v): %v", want, last, err)
			}
			if typ != websocket.MessageBinary {
				t.Fatalf("message type %v, want binary", typ)
			}
			r, g, bl, w, h := centre(t, b)
			if w != 640 || h != 360 {
				t.Fatalf("frame %dx%d, want 640x360", w, h)
			}
			last = [3]uint32{r, g, bl}
			near := true
			for i := range 3 {
				if d := int(last[i]) - int(want[i]); d > 40 || d < -40 {
					near = false
				}
			}
			if near {
				return
			}
		}
	}
	// A still page: the viewer gets the frame painted before it joined.
	waitColour([3]uint32{255, 0, 0})
	// Garbage and refused input are ignored; the connection stays usable.
	for _, m := range []string{`{`, `{"type":"keydown","x":1,"y":1}`, `{"type":"mousedown","x":-5,"y":10}`, `{"type":"mousedown","x":10,"y":9999}`} {
		if err := conn.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"type":"mousedown","x":200,"y":150}`)); err != nil {
		t.Fatal(err)
	}
	waitColour([3]uint32{0, 0, 255})
	if st := s.Stats(); st.Captured == 0 || st.Sent == 0 || st.Inputs != 1 {
		t.Errorf("stats %+v: want frames captured and sent, exactly one input replayed", st)
	}
	if s.BrowserPID() <= 0 {
		t.Error("no browser PID")
	}
	conn.Close(websocket.StatusNormalClosure, "")
	if err := s.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
}

func TestStartNeedsAPage(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil {
		t.Fatal("Start without PageURL succeeded")
	}
}
