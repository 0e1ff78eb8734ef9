// Live stream stats from the peer's getStats: codec, size, fps, bitrate
// (from the bytes delta), RTT of the selected pair and the local
// candidate's type and transport. One Stats per peer connection.

const FIELDS = ["codec", "resolution", "fps", "bitrate", "rtt", "candidate"];

// clearStats shows no stats (no peer).
export function clearStats(ui) {
  for (const k of FIELDS) ui[k].textContent = "–";
}

export class Stats {
  constructor(pc, ui) {
    this.pc = pc;
    this.ui = ui;
    this.lastBytes = null; // bytes received at lastTs, for the bitrate
    this.lastTs = 0;
  }

  async update() {
    const ui = this.ui;
    const report = await this.pc.getStats();
    let inbound = null;
    let pair = null;
    let selectedPairId = null;
    report.forEach((s) => {
      if (s.type === "inbound-rtp" && s.kind === "video") inbound = s;
      if (s.type === "transport" && s.selectedCandidatePairId) selectedPairId = s.selectedCandidatePairId;
    });
    if (selectedPairId) pair = report.get(selectedPairId);
    if (!pair) {
      report.forEach((s) => {
        if (s.type === "candidate-pair" && s.nominated && s.state === "succeeded") pair = s;
      });
    }
    if (inbound) {
      const codec = inbound.codecId ? report.get(inbound.codecId) : null;
      ui.codec.textContent = codec?.mimeType?.replace("video/", "") ?? "–";
      ui.resolution.textContent = inbound.frameWidth ? `${inbound.frameWidth}×${inbound.frameHeight}` : "–";
      ui.fps.textContent = inbound.framesPerSecond != null ? String(Math.round(inbound.framesPerSecond)) : "–";
      const now = inbound.timestamp;
      if (this.lastBytes != null && now > this.lastTs) {
        const kbps = ((inbound.bytesReceived - this.lastBytes) * 8) / (now - this.lastTs);
        ui.bitrate.textContent = kbps >= 1000 ? `${(kbps / 1000).toFixed(2)} Mbit/s` : `${Math.round(kbps)} kbit/s`;
      }
      this.lastBytes = inbound.bytesReceived;
      this.lastTs = now;
    }
    if (pair) {
      ui.rtt.textContent = pair.currentRoundTripTime != null ? `${Math.round(pair.currentRoundTripTime * 1000)} ms` : "–";
      const local = report.get(pair.localCandidateId);
      // Path and transport: host/udp, relay/tcp (TURN over TCP), relay/tls...
      const transport = local?.relayProtocol || local?.protocol;
      ui.candidate.textContent = local?.candidateType ? local.candidateType + (transport ? `/${transport}` : "") : "–";
    }
  }
}
