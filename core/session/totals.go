package session

// retireLocked adds a stopping pipeline's counters to the session's
// totals; s.mu held.
func (s *Session) retireLocked(p *codecPipe) {
	if s.retired == nil {
		s.retired = map[string]PipelineStats{}
	}
	st, r := p.Stats(0), s.retired[p.Codec()]
	r.Codec = p.Codec()
	r.FramesEncoded += st.FramesEncoded
	r.Keyframes += st.Keyframes
	r.FramesDropped += st.FramesDropped
	r.BadFrames += st.BadFrames
	r.Bytes += st.Bytes
	r.Restarts += st.Restarts
	s.retired[p.Codec()] = r
}

// PipelineTotals are each listed session's per-codec counters since it
// began (by session id): its running pipelines' plus those of pipelines
// that stopped (their last viewer left). Only the counter fields are set;
// they never go down while a session is listed, so /metrics can sum them
// over sessions that come and go.
func (m *Manager) PipelineTotals() map[string][]PipelineStats {
	out := map[string][]PipelineStats{}
	for _, s := range m.live() {
		s.mu.Lock()
		tot := map[string]PipelineStats{}
		for c, r := range s.retired {
			tot[c] = r
		}
		for c, p := range s.pipes {
			st, r := p.Stats(0), tot[c]
			r.Codec = c
			r.FramesEncoded += st.FramesEncoded
			r.Keyframes += st.Keyframes
			r.FramesDropped += st.FramesDropped
			r.BadFrames += st.BadFrames
			r.Bytes += st.Bytes
			r.Restarts += st.Restarts
			tot[c] = r
		}
		s.mu.Unlock()
		list := make([]PipelineStats, 0, len(tot))
		for _, r := range tot {
			list = append(list, r)
		}
		out[s.id] = list
	}
	return out
}
