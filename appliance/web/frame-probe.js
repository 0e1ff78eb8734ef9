// FrameProbe measures input → the next video frame that differs from the
// one shown at input time, via requestVideoFrameCallback: the latency a
// person sees.

const FRAME_WAIT_MS = 2000; // give up looking for a changed frame

// changed: a few pixels moved clearly (codec noise stays below the step).
function changed(a, b) {
  let n = 0;
  for (let i = 0; i < a.length; i += 4) {
    if (Math.abs(a[i] - b[i]) > 40 || Math.abs(a[i + 1] - b[i + 1]) > 40 || Math.abs(a[i + 2] - b[i + 2]) > 40) {
      if (++n >= 2) return true;
    }
  }
  return false;
}

export class FrameProbe {
  // done(ms) is called with each measurement.
  constructor(video, done) {
    this.video = video;
    this.done = done;
    this.canvas = document.createElement("canvas");
    this.canvas.width = 160;
    this.canvas.height = 90;
    this.ctx = this.canvas.getContext("2d", { willReadFrequently: true });
    this.probe = null; // the measurement under way; one at a time
  }

  thumb() {
    if (!this.video.videoWidth) return null;
    try {
      this.ctx.drawImage(this.video, 0, 0, this.canvas.width, this.canvas.height);
      return this.ctx.getImageData(0, 0, this.canvas.width, this.canvas.height).data;
    } catch {
      return null;
    }
  }

  // start measures from t0 unless a measurement is under way.
  start(t0) {
    const video = this.video;
    if (!video.requestVideoFrameCallback || this.probe) return;
    const ref = this.thumb();
    if (!ref) return;
    const mine = { t0, ref };
    this.probe = mine;
    const step = (now, meta) => {
      if (this.probe !== mine) return;
      if (now - t0 > FRAME_WAIT_MS) {
        this.probe = null;
        return;
      }
      const cur = this.thumb();
      if (cur && changed(ref, cur)) {
        const at = meta?.presentationTime ?? now;
        this.probe = null;
        this.done(Math.max(0, Math.round(at - t0)));
        return;
      }
      video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
  }
}
