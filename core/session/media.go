package session

import (
	"context"

	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/capture"
)

// Video are the encode targets for every pipeline.
type Video = media.Video

// PipelineStats is one codec pipeline's state in a session snapshot.
type PipelineStats = media.Stats

// codecPipe is one codec's pipeline and how many viewers hold it.
type codecPipe struct {
	*media.Pipeline
	refs int // guarded by Session.mu
}

// newPipe makes codec's pipeline, which sees the session through
// pipeSource; the caller starts it.
func (s *Session) newPipe(codec string) (*codecPipe, error) {
	p, err := media.NewPipeline(codec, "tabcast-"+s.id, pipeSource{s}, s.log)
	if err != nil {
		return nil, err
	}
	return &codecPipe{Pipeline: p}, nil
}

// pipeSource is what a session's pipelines see of it (media.Source).
type pipeSource struct{ s *Session }

var _ media.Source = pipeSource{}

func (ps pipeSource) Video() Video { return ps.s.m.video() }

func (ps pipeSource) Size() (int, int) { return ps.s.width, ps.s.height }

func (ps pipeSource) LastFrame() *capture.Frame { return ps.s.lastFrame.Load() }

func (ps pipeSource) Encoder(ctx context.Context) (media.Encoder, func(error), error) {
	h := ps.s.m.encoder
	enc, gen, err := h.Get(ctx)
	if err != nil {
		return nil, nil, err
	}
	// The stream outlives one call: the pipeline reports its errors, and
	// Report restarts the plugin when one says it is broken.
	return enc, func(err error) { h.Report(gen, err) }, nil
}

func (ps pipeSource) Passthrough(codec string) (bool, <-chan struct{}) {
	ps.s.mu.Lock()
	defer ps.s.mu.Unlock()
	return ps.s.passthroughLocked(codec), ps.s.capModeCh
}

func (ps pipeSource) TabControl(ctx context.Context, c capture.StreamControl) {
	ps.s.tabControl(ctx, c)
}

func (ps pipeSource) LowBandwidth() { ps.s.fallBackToCDP(ReasonLowBandwidth, nil) }

// brokenPlugin says whether err means the plugin process is gone or hung,
// as opposed to the plugin refusing one request.
func brokenPlugin(err error) bool { return plugins.Broken(err) }
