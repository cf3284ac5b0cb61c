// Decodes the appliance's H.264 (Annex B, one access unit per message) with WebCodecs and
// hands back each picture cropped to the phone's screen, as an ImageBitmap to draw.
// Messages in: {type:'configure', codec, crop:{x,y,width,height}, sourceWidth, width, height}
//              {type:'chunk', key, timestamp, data}   out: {type:'frame', bitmap, timestamp}
//              {type:'error', message}, {type:'needkey'}

let decoder = null;
let config = null;
let waitingForKey = true;

function fail(message) {
  postMessage({ type: 'error', message });
}

function makeDecoder() {
  decoder = new VideoDecoder({
    output: async (frame) => {
      try {
        const c = config;
        // The stream is the whole capture; the phone is the active rectangle of it.
        const scale = frame.displayWidth / (c.sourceWidth || frame.displayWidth);
        const bitmap = await createImageBitmap(frame,
          Math.round(c.crop.x * scale), Math.round(c.crop.y * scale),
          Math.max(1, Math.round(c.crop.width * scale)), Math.max(1, Math.round(c.crop.height * scale)),
          { resizeWidth: c.width, resizeHeight: c.height, resizeQuality: 'medium' });
        postMessage({ type: 'frame', bitmap, timestamp: frame.timestamp }, [bitmap]);
      } catch (e) {
        fail(`drawing a frame failed: ${e.message}`);
      } finally {
        frame.close();
      }
    },
    error: (e) => {
      fail(`the decoder failed: ${e.message}`);
      waitingForKey = true;
      postMessage({ type: 'needkey' });
      makeDecoder();
      if (config) decoder.configure({ codec: config.codec, optimizeForLatency: true });
    },
  });
}

// The RFC 6381 string (avc1.PPCCLL) of the first SPS in Annex B bytes, or null: a viewer
// that joined before the stream's first IDR was told a default, and the IDR's own SPS says
// what the stream really is.
function codecOf(bytes) {
  for (let i = 0; i + 6 < bytes.length; i++) {
    if (bytes[i] === 0 && bytes[i + 1] === 0 && bytes[i + 2] === 1 && (bytes[i + 3] & 0x1f) === 7) {
      const hex = (b) => b.toString(16).toUpperCase().padStart(2, '0');
      return `avc1.${hex(bytes[i + 4])}${hex(bytes[i + 5])}${hex(bytes[i + 6])}`;
    }
  }
  return null;
}

onmessage = async (ev) => {
  const m = ev.data;
  if (m.type === 'configure') {
    const fresh = !config || config.codec !== m.codec;
    config = m;
    if (fresh) {
      if (typeof VideoDecoder === 'undefined') {
        fail('this browser has no WebCodecs VideoDecoder');
        return;
      }
      const support = await VideoDecoder.isConfigSupported({ codec: m.codec });
      if (!support.supported) {
        fail(`this browser cannot decode ${m.codec}`);
        return;
      }
      if (decoder) decoder.close();
      makeDecoder();
      // No description: the chunks are Annex B with SPS/PPS in every IDR.
      decoder.configure({ codec: m.codec, optimizeForLatency: true });
      waitingForKey = true;
    }
  } else if (m.type === 'chunk') {
    if (!decoder || decoder.state !== 'configured') return;
    if (waitingForKey && !m.key) return;
    waitingForKey = false;
    if (m.key) {
      const codec = codecOf(new Uint8Array(m.data));
      if (codec && codec !== config.codec) {
        config = { ...config, codec };
        decoder.configure({ codec, optimizeForLatency: true });
      }
    }
    decoder.decode(new EncodedVideoChunk({ type: m.key ? 'key' : 'delta', timestamp: m.timestamp, data: m.data }));
  } else if (m.type === 'reset') {
    waitingForKey = true;
  }
};
