// The DataChannel wire format (docs/protocol.md, "DataChannels"): a version
// byte, then UTF-8 JSON. The constants mirror Go's; appliance/web's
// wire_test.go fails when they differ (core/wire, core/peer, core/action,
// core/dispatch).

export const VERSION = 1; // wire.Version
export const POINTER_HIGH_WATER = 64 * 1024; // peer.PointerHighWater: drop moves above this buffered…
export const POINTER_LOW_WATER = 16 * 1024; // peer.PointerLowWater: …until the channel drains to this
export const MAX_WHEEL_DELTA = 100000; // dispatch.MaxWheelDelta

// Modifier bits as CDP numbers them (action.ModAlt…ModShift).
export const MOD_ALT = 1;
export const MOD_CTRL = 2;
export const MOD_META = 4;
export const MOD_SHIFT = 8;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// encode frames one message: the version byte, then UTF-8 JSON.
export function encode(obj) {
  const body = encoder.encode(JSON.stringify(obj));
  const out = new Uint8Array(body.length + 1);
  out[0] = VERSION;
  out.set(body, 1);
  return out;
}

// decode reads one server message, or returns null.
export function decode(data) {
  if (!(data instanceof ArrayBuffer)) return null;
  const u8 = new Uint8Array(data);
  if (u8.length < 2 || u8[0] !== VERSION) return null;
  try {
    const msg = JSON.parse(decoder.decode(u8.subarray(1)));
    return msg && typeof msg === "object" ? msg : null;
  } catch {
    return null;
  }
}

// modifiersOf is a DOM event's modifier keys as bits.
export function modifiersOf(ev) {
  return (ev.altKey ? MOD_ALT : 0) | (ev.ctrlKey ? MOD_CTRL : 0) | (ev.metaKey ? MOD_META : 0) | (ev.shiftKey ? MOD_SHIFT : 0);
}

// localReject is an ack the panel makes up for an action that never left.
export function localReject(code, message) {
  return { type: "ack", actionId: "", status: "rejected", code, message, local: true };
}
