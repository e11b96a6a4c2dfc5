// stemdot view: the page. Plain JavaScript, no build step, nothing fetched from elsewhere.
// Every URL is relative: the page lives under /TOKEN/, so every request carries the token.
'use strict';

const $ = (id) => document.getElementById(id);
// In a frame (stemdot.view in a notebook's output), the panes share the frame's width.
if (window.top !== window.self) document.body.classList.add('framed');

// The page's state, also read by the browser tests (window.stemdotView).
const S = window.stemdotView = {
  ready: false,          // the first pass has ended and the first image is requested
  info: null,            // /api/info
  det: null,             // the detector: {type, cx, cy, r, ri, ro, x, y, w, h}
  spec: '',              // its spec
  centre: null,          // the direct beam's disk {x, y, r} in the sum frame (auto specs); null: none found
  painted: null,         // the image shown: {spec, seq, shape, dtype, all, data, part}
  paintedSeq: 0,
  frame: null,           // the frame shown: {kind, y, x, shape, data, seq}
  frameSeq: 0,
  latencies: [],         // ms from the mouse event to the animation frame presenting its image
  cancelled: 0,          // requests cancelled for a newer detector
  errors: [],
  dragging: false,
  // The live mode (stemdot view --live): the newest image's number and what the server
  // says about it (liveMeta), the times (performance.now) the images were painted, and
  // the latencies in ms from each frame's arrival at the server to the animation frame
  // presenting the first image that shows it.
  live: false,
  liveSeq: 0,
  liveMeta: null,
  livePainted: [],
  liveLatencies: [],
  liveDelivery: [],      // ms from each image's publication to the animation frame presenting it
};

// ---------- errors ----------
// showError shows msg in the banner; from an image request (src 'image'), the next
// image shown takes it away.
function showError(msg, src) {
  S.errors.push(msg);
  $('error-text').textContent = msg;
  $('error').dataset.src = src || '';
  $('error').hidden = false;
}
$('error-close').onclick = () => { $('error').hidden = true; };

class HTTPError extends Error {
  constructor(status, msg) { super(msg); this.status = status; }
}

// getArray fetches a binary array: raw little-endian values, X-Shape and X-DType headers.
async function getArray(url, signal) {
  const r = await fetch(url, { signal });
  if (!r.ok) throw new HTTPError(r.status, (await r.text()).trim() || r.statusText);
  const shape = r.headers.get('X-Shape').split(',').map(Number);
  const dtype = r.headers.get('X-DType');
  const buf = await r.arrayBuffer();
  const data = dtype === 'f8' ? new Float64Array(buf) : new Float32Array(buf);
  const frames = r.headers.get('X-Frames'); // the live mode's frames summed
  return { shape, dtype, data, frames: frames === null ? null : Number(frames) };
}

// ---------- numbers ----------
const fmt = (v) => String(Math.round(v * 100) / 100);
function fmtVal(v) {
  if (!isFinite(v)) return String(v);
  const a = Math.abs(v);
  return (a !== 0 && (a >= 1e5 || a < 1e-3)) ? v.toExponential(3) : String(+v.toPrecision(5));
}

// finiteRange is [min, max] of the finite values of a, or of the percentiles lo and hi.
function finiteRange(a, plo, phi) {
  const v = [];
  for (let i = 0; i < a.length; i++) if (isFinite(a[i])) v.push(a[i]);
  if (v.length === 0) return [0, 1];
  const f = Float64Array.from(v).sort();
  const at = (p) => f[Math.min(f.length - 1, Math.max(0, Math.round(p / 100 * (f.length - 1))))];
  return [at(plo), at(phi)];
}

// ---------- colour maps ----------
const stops = {
  grey: [[0, 0, 0], [255, 255, 255]],
  viridis: [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]],
  inferno: [[0, 0, 4], [31, 12, 72], [85, 15, 109], [136, 34, 106], [186, 54, 85], [227, 89, 51], [249, 140, 10], [249, 201, 50], [252, 255, 164]],
  coolwarm: [[59, 76, 192], [124, 159, 249], [192, 212, 245], [242, 203, 183], [238, 132, 104], [180, 4, 38]],
};
const luts = {};
function lut(name) {
  if (luts[name]) return luts[name];
  const s = stops[name], out = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = i / 255 * (s.length - 1), k = Math.min(s.length - 2, Math.floor(t)), f = t - k;
    for (let c = 0; c < 3; c++) out[3 * i + c] = Math.round(s[k][c] * (1 - f) + s[k + 1][c] * f);
  }
  return (luts[name] = out);
}

// render draws values a (rows × cols) into an ImageData with colour map name, from lo
// (first colour) to hi (last), log: log scale from lo. NaN is black.
function render(a, rows, cols, lo, hi, name, log) {
  const img = new ImageData(cols, rows), px = img.data, L = lut(name);
  const span = log ? Math.log1p(Math.max(hi - lo, 0)) : hi - lo;
  for (let i = 0; i < rows * cols; i++) {
    const v = a[i];
    let k = 0;
    if (isFinite(v)) {
      let t = log ? Math.log1p(Math.max(v - lo, 0)) : v - lo;
      t = span > 0 ? t / span : 0;
      k = Math.max(0, Math.min(255, Math.round(t * 255)));
      px[4 * i] = L[3 * k]; px[4 * i + 1] = L[3 * k + 1]; px[4 * i + 2] = L[3 * k + 2];
    }
    px[4 * i + 3] = 255;
  }
  return img;
}

// fitCanvas sizes canvas c for an image of rows × cols, scaled to at most 512 pixels on
// its long side (up or down), and returns the scale.
function fitCanvas(c, rows, cols) {
  const k = 512 / Math.max(rows, cols);
  const w = Math.max(1, Math.round(cols * k)), h = Math.max(1, Math.round(rows * k));
  if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
  return k;
}

// ---------- the frame (left) ----------
const frameCanvas = $('frame');
const frameOff = document.createElement('canvas');
let frameScale = 1;

function sigShape() { return S.info.sig_shape; }

function drawFrame() {
  if (!S.frame) return;
  const [sy, sx] = sigShape();
  frameScale = fitCanvas(frameCanvas, sy, sx);
  if (frameOff.width !== sx || frameOff.height !== sy) { frameOff.width = sx; frameOff.height = sy; }
  const log = $('frame-scale').value === 'log';
  if (!S.frame.img || S.frame.log !== log) {
    const [lo, hi] = finiteRange(S.frame.data, 0, 100);
    S.frame.img = render(S.frame.data, sy, sx, lo, hi, 'grey', log);
    S.frame.log = log;
  }
  frameOff.getContext('2d').putImageData(S.frame.img, 0, 0);
  const g = frameCanvas.getContext('2d');
  g.imageSmoothingEnabled = false;
  g.drawImage(frameOff, 0, 0, frameCanvas.width, frameCanvas.height);
  drawDetector(g);
  const f = S.frame;
  $('frame-caption').textContent = f.kind === 'pick' ? `frame at scan position (y ${f.y}, x ${f.x})` :
    `${f.kind} frame` + (f.frames != null ? ` of ${f.frames} frames` : '');
}

// Sig coordinates (pixel centres at integers) ↔ canvas pixels.
const toCanvas = (v) => (v + 0.5) * frameScale;
const toSig = (p) => p / frameScale - 0.5;

function drawDetector(g) {
  const d = S.det, k = frameScale;
  g.lineWidth = 2;
  g.strokeStyle = '#3fe0d0';
  g.fillStyle = 'rgba(63, 224, 208, 0.15)';
  const circle = (r) => { g.beginPath(); g.arc(toCanvas(d.cx), toCanvas(d.cy), Math.max(r * k, 1), 0, 2 * Math.PI); };
  const cross = (x, y, s) => {
    g.beginPath(); g.moveTo(toCanvas(x) - s, toCanvas(y)); g.lineTo(toCanvas(x) + s, toCanvas(y));
    g.moveTo(toCanvas(x), toCanvas(y) - s); g.lineTo(toCanvas(x), toCanvas(y) + s); g.stroke();
  };
  switch (d.type) {
    case 'disk': circle(d.r); g.fill(); g.stroke(); break;
    case 'com':
      if (d.r !== null) { circle(d.r); g.fill(); g.stroke(); }
      cross(d.cx, d.cy, 10); break;
    case 'ring':
      g.beginPath();
      g.arc(toCanvas(d.cx), toCanvas(d.cy), d.ro * k, 0, 2 * Math.PI);
      g.moveTo(toCanvas(d.cx) + d.ri * k, toCanvas(d.cy));
      g.arc(toCanvas(d.cx), toCanvas(d.cy), d.ri * k, 0, 2 * Math.PI, true);
      g.fill(); g.stroke(); break;
    case 'rect':
      g.beginPath(); g.rect(d.x * k, d.y * k, d.w * k, d.h * k); g.fill(); g.stroke();
      g.fillStyle = '#3fe0d0'; g.fillRect((d.x + d.w) * k - 4, (d.y + d.h) * k - 4, 8, 8); break;
    case 'point':
      g.strokeRect(d.cx * k, d.cy * k, Math.max(k, 3), Math.max(k, 3)); cross(d.cx, d.cy, 8); break;
  }
}

// ---------- the detector ----------
function defaultDetector(type, from) {
  const [sy, sx] = sigShape();
  const cx = from ? from.cx : Math.floor(sx / 2), cy = from ? from.cy : Math.floor(sy / 2);
  const m = Math.min(sx, sy);
  const r = from && from.r ? from.r : Math.max(1, Math.round(m / 8));
  const d = { type, cx, cy, r, ri: Math.max(1, Math.round(m / 6)), ro: Math.max(2, Math.round(m / 3)),
    x: Math.round(cx - r), y: Math.round(cy - r), w: 2 * r, h: 2 * r };
  if (type === 'com') d.r = null; // the whole frame
  return d;
}

// specOf is d's spec: its auto spec (d.auto, from parseSpec) while d is where that put
// it, else its numbers.
function specOf(d) {
  const s = numSpec(d);
  return d.auto && d.auto.of === s ? d.auto.spec : s;
}

function numSpec(d) {
  switch (d.type) {
    case 'disk': return `disk:${fmt(d.cx)},${fmt(d.cy)},${fmt(d.r)}`;
    case 'ring': return `ring:${fmt(d.cx)},${fmt(d.cy)},${fmt(d.ri)},${fmt(d.ro)}`;
    case 'rect': return `rect:${fmt(d.x)},${fmt(d.y)},${fmt(d.w)},${fmt(d.h)}`;
    case 'point': return `point:${fmt(d.cx)},${fmt(d.cy)}`;
    case 'com': return d.r === null ? `com:${fmt(d.cx)},${fmt(d.cy)}` : `com:${fmt(d.cx)},${fmt(d.cy)},${fmt(d.r)}`;
  }
}

// parseSpec reads a spec typed by the user into a detector, or throws saying why. The
// auto specs (disk:auto[,R], ring:auto,RI,RO, com:auto[,R]) are about the direct beam's
// disk that the server found in the sum frame (S.centre), as stemdot apply makes them.
function parseSpec(text) {
  const m = /^\s*(disk|ring|rect|point|com)\s*(?::(.*))?$/.exec(text);
  if (!m) throw new Error(`spec "${text}": want disk:CX,CY,R, ring:CX,CY,RI,RO, rect:X,Y,W,H, point:X,Y, com[:CX,CY[,R]], or disk:auto[,R], ring:auto,RI,RO, com:auto[,R]`);
  const args = m[2] === undefined ? [] : m[2].split(',');
  const auto = args.length > 0 && args[0].trim() === 'auto';
  if (auto) args.shift();
  const v = args.map((s) => Number(s.trim()));
  if (v.some((x) => !isFinite(x))) throw new Error(`spec "${text}": every value must be a number`);
  const want = (auto ? { disk: [0, 1], ring: [2], com: [0, 1] } : { disk: [3], ring: [4], rect: [4], point: [2], com: [0, 2, 3] })[m[1]];
  if (!want) throw new Error(`spec "${text}": only disk, ring and com take auto (the direct beam's centre)`);
  if (!want.includes(v.length)) throw new Error(`spec "${text}": ${m[1]}${auto ? ':auto' : ''} takes ${want.join(' or ')} numbers`);
  if (auto) {
    if (!S.centre) throw new Error(`spec "${text}": no direct beam's disk was found in the sum frame for the auto specs: give the centre's numbers, or drag the detector onto the beam`);
    v.unshift(S.centre.x, S.centre.y);
    if (m[1] === 'disk' && v.length === 2) v.push(S.centre.r);
  }
  const d = defaultDetector(m[1], S.det);
  switch (m[1]) {
    case 'disk': [d.cx, d.cy, d.r] = v; break;
    case 'ring': [d.cx, d.cy, d.ri, d.ro] = v; break;
    case 'rect': [d.x, d.y, d.w, d.h] = v; break;
    case 'point': [d.cx, d.cy] = v; break;
    case 'com':
      if (v.length >= 2) [d.cx, d.cy] = v;
      d.r = v.length === 3 ? v[2] : null;
      if (v.length === 0) { const [sy, sx] = sigShape(); d.cx = Math.floor(sx / 2); d.cy = Math.floor(sy / 2); }
      break;
  }
  if (auto) d.auto = { spec: [`${m[1]}:auto`, ...args.map((a) => fmt(Number(a)))].join(','), of: numSpec(d) };
  return d;
}

// detectorChanged shows the new detector and asks for its image; t0 is the time of the
// event that changed it (performance.now's clock).
function detectorChanged(t0) {
  S.spec = specOf(S.det);
  const inp = $('spec');
  if (document.activeElement !== inp) inp.value = S.spec;
  inp.classList.remove('bad');
  $('det-type').value = S.det.type;
  drawFrame();
  if (S.live) { setLiveDetector(S.spec); return; }
  requestImage(S.spec, t0);
}

// ---------- mouse and keys on the frame ----------
let drag = null; // {mode, dx, dy}

function hit(px, py) {
  const d = S.det, k = frameScale, x = toSig(px), y = toSig(py);
  const dist = Math.hypot(x - d.cx, y - d.cy) * k; // canvas pixels
  const near = (r) => Math.abs(dist - r * k) <= 6;
  switch (d.type) {
    case 'disk':
    case 'com':
      if (d.r !== null && near(d.r)) return { mode: 'r' };
      break;
    case 'ring':
      if (near(d.ro)) return { mode: 'ro' };
      if (near(d.ri)) return { mode: 'ri' };
      break;
    case 'rect':
      if (Math.abs(px - (d.x + d.w) * k) <= 8 && Math.abs(py - (d.y + d.h) * k) <= 8) return { mode: 'wh' };
      if (px >= d.x * k && px <= (d.x + d.w) * k && py >= d.y * k && py <= (d.y + d.h) * k)
        return { mode: 'move', dx: x - d.x, dy: y - d.y };
      return { mode: 'move', dx: d.w / 2, dy: d.h / 2 };
  }
  const inside = d.type === 'ring' ? dist <= d.ro * k : (d.r !== null && d.type !== 'point' && dist <= d.r * k);
  return inside ? { mode: 'move', dx: x - d.cx, dy: y - d.cy } : { mode: 'move', dx: 0, dy: 0 };
}

function canvasXY(ev) {
  const b = frameCanvas.getBoundingClientRect();
  return [(ev.clientX - b.left) * frameCanvas.width / b.width, (ev.clientY - b.top) * frameCanvas.height / b.height];
}

function dragTo(ev) {
  const [px, py] = canvasXY(ev);
  const x = toSig(px), y = toSig(py), d = S.det;
  const r = Math.round(Math.hypot(x - d.cx, y - d.cy));
  const [sy, sx] = sigShape(), clamp = (v, lo, hi) => Math.max(lo, Math.min(hi, v));
  if (px === drag.at[0] && py === drag.at[1]) Object.assign(d, drag.was); // a click moves nothing
  else switch (drag.mode) {
    case 'move': // kept on the frame: a detector that selects no pixel is an error
      if (d.type === 'rect') { d.x = clamp(Math.round(x - drag.dx), 1 - d.w, sx - 1); d.y = clamp(Math.round(y - drag.dy), 1 - d.h, sy - 1); }
      else { d.cx = clamp(Math.round(x - drag.dx), 0, sx - 1); d.cy = clamp(Math.round(y - drag.dy), 0, sy - 1); }
      break;
    case 'r': d.r = Math.max(1, r); break; // the specs refuse a radius of 0
    case 'ro': d.ro = Math.max(r, d.ri + 1); break;
    case 'ri': d.ri = Math.max(1, Math.min(r, d.ro - 1)); break;
    case 'wh': d.w = Math.max(1, Math.round(x + 0.5 - d.x)); d.h = Math.max(1, Math.round(y + 0.5 - d.y)); break;
  }
  const spec = specOf(d);
  if (spec !== S.spec) detectorChanged(ev.timeStamp);
}

frameCanvas.addEventListener('mousedown', (ev) => {
  if (!S.ready || ev.button !== 0) return;
  ev.preventDefault();
  frameCanvas.focus();
  const [px, py] = canvasXY(ev);
  drag = { ...hit(px, py), at: [px, py], was: { ...S.det } };
  S.dragging = true;
  dragTo(ev);
});
window.addEventListener('mousemove', (ev) => { if (drag) dragTo(ev); });
window.addEventListener('mouseup', (ev) => {
  if (!drag) return;
  dragTo(ev);
  drag = null;
  S.dragging = false;
  if (pending) requestImage(pending.spec, pending.t0); // the newest now, not after the run
});

// shrunk is radius v changed by g, not below 1 pixel (the specs refuse 0), nor below v
// where a radius under 1 was typed.
const shrunk = (v, g) => Math.max(Math.min(v, 1), v + g);

frameCanvas.addEventListener('keydown', (ev) => {
  if (!S.ready) return;
  const d = S.det, step = ev.shiftKey ? 10 : 1;
  const move = { ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] }[ev.key];
  const grow = { '+': 1, '=': 1, '-': -1, '_': -1 }[ev.key];
  if (move) { // kept on the frame, as a drag keeps it (never moved further out either)
    const [sy, sx] = sigShape();
    const to = (v, dv, lo, hi) => Math.max(Math.min(lo, v), Math.min(Math.max(hi, v), v + dv));
    if (d.type === 'rect') { d.x = to(d.x, move[0], 1 - d.w, sx - 1); d.y = to(d.y, move[1], 1 - d.h, sy - 1); }
    else { d.cx = to(d.cx, move[0], 0, sx - 1); d.cy = to(d.cy, move[1], 0, sy - 1); }
  } else if (grow) {
    const g = grow; // one pixel: + is Shift+= on many keyboards
    if (d.type === 'disk' || (d.type === 'com' && d.r !== null)) d.r = shrunk(d.r, g);
    else if (d.type === 'ring') d.ro = Math.max(d.ri + 1, d.ro + g);
    else if (d.type === 'rect') { d.w = Math.max(1, d.w + g); d.h = Math.max(1, d.h + g); }
  } else if (ev.key === '[' || ev.key === ']') {
    if (d.type === 'ring') d.ri = Math.min(d.ro - 1, shrunk(d.ri, ev.key === ']' ? 1 : -1));
  } else return;
  ev.preventDefault();
  detectorChanged(ev.timeStamp);
});

$('spec').addEventListener('keydown', (ev) => {
  if (ev.key !== 'Enter') return;
  try {
    S.det = parseSpec(ev.target.value);
    detectorChanged(ev.timeStamp);
  } catch (e) {
    ev.target.classList.add('bad');
    showError(e.message);
  }
});

$('det-type').addEventListener('change', (ev) => {
  S.det = defaultDetector(ev.target.value, S.det);
  detectorChanged(ev.timeStamp);
});
$('frame-scale').addEventListener('change', drawFrame);
$('frame-kind').addEventListener('change', (ev) => { if (ev.target.value !== 'pick') loadFrame(ev.target.value); });

// ---------- images: newest wins ----------
// At most one request is in flight. A new detector cancels it (the server then stops the
// run) unless a drag is under way and the run is past half of the last run's time: then
// the newest detector alone waits for it (replacing any older one waiting), so that a
// continuous drag still shows images; at mouseup the waiting one is sent at once.
let inflight = null, pending = null, lastDuration = 0, seq = 0;
const pageID = Math.random().toString(36).slice(2);

function requestImage(spec, t0) {
  if (inflight && inflight.spec === spec) { pending = null; return; }
  if (inflight) {
    const age = performance.now() - inflight.start;
    if (S.dragging && age >= lastDuration / 2) { pending = { spec, t0 }; return; }
    inflight.ctrl.abort();
    inflight = null;
    S.cancelled++;
  }
  pending = null;
  if (S.painted && S.painted.spec === spec) { setBusy(false); return; }
  runImage(spec, t0);
}

async function runImage(spec, t0, retry) {
  const job = inflight = { spec, ctrl: new AbortController(), start: performance.now(), t0 };
  setBusy(true);
  try {
    const arr = await getArray(`api/image?spec=${encodeURIComponent(spec)}&page=${pageID}&seq=${++seq}`, job.ctrl.signal);
    if (inflight !== job) return;
    lastDuration = performance.now() - job.start;
    paintImage(spec, arr, t0, lastDuration);
    updateCommand(spec); // the command of the image shown, not of a detector refused since
  } catch (e) {
    if (e.name === 'AbortError') return; // replaced by a newer one
    if (e.status === 409 && inflight === job && !retry) { // cancelled, yet still the newest: once more
      inflight = null;
      return runImage(spec, t0, true);
    }
    if (inflight === job && e.status !== 409) showError(e.message, 'image');
  } finally {
    if (inflight === job) {
      inflight = null;
      if (pending) { const p = pending; pending = null; requestImage(p.spec, p.t0); } else setBusy(false);
    }
  }
}

function setBusy(b) { $('busy').hidden = !b; }

// ---------- the image (right) ----------
const imageCanvas = $('image');
const imageOff = document.createElement('canvas');
let imageScale = 1;

function navRC() {
  const n = S.info.nav_shape;
  return n.length === 2 ? [n[0], n[1]] : [1, n[0]];
}

function paintImage(spec, arr, t0, ms, live) {
  const [rows, cols] = navRC(), n = rows * cols;
  const com = spec.startsWith('com');
  const part = com ? Number($('com-part').value) : 0;
  S.painted = { spec, shape: arr.shape, dtype: arr.dtype, all: arr.data, part, data: arr.data.subarray(part * n, (part + 1) * n), seq: ++S.paintedSeq, ms, live };
  $('com-part-label').hidden = !com;
  if ($('error').dataset.src === 'image') $('error').hidden = true;
  if ($('auto').checked) setLimits();
  drawImage();
  if (t0 !== undefined) {
    requestAnimationFrame(() => {
      S.latencies.push(performance.now() - t0);
      S.presentedSeq = S.painted.seq;
    });
  } else requestAnimationFrame(() => { S.presentedSeq = S.painted.seq; });
}

function setLimits() {
  const [lo, hi] = finiteRange(S.painted.data, 0.5, 99.5);
  $('lo').value = fmtVal(lo);
  $('hi').value = fmtVal(hi);
}

function drawImage() {
  const p = S.painted;
  if (!p) return;
  const [rows, cols] = navRC();
  imageScale = fitCanvas(imageCanvas, rows, cols);
  if (imageOff.width !== cols || imageOff.height !== rows) { imageOff.width = cols; imageOff.height = rows; }
  const lo = Number($('lo').value), hi = Number($('hi').value), cmap = $('cmap').value;
  imageOff.getContext('2d').putImageData(render(p.data, rows, cols, lo, hi, cmap, false), 0, 0);
  const g = imageCanvas.getContext('2d');
  g.imageSmoothingEnabled = false;
  g.drawImage(imageOff, 0, 0, imageCanvas.width, imageCanvas.height);
  if (S.frame && S.frame.kind === 'pick') {
    g.strokeStyle = '#ff4d4d'; g.lineWidth = 2;
    g.strokeRect(S.frame.x * imageScale, S.frame.y * imageScale, Math.max(imageScale, 4), Math.max(imageScale, 4));
  }
  drawColorbar(lo, hi, cmap);
  const what = p.spec.startsWith('com') ? ['shift y', 'shift x', 'magnitude'][p.part] + ' (px) of ' : '';
  const m = p.live;
  $('image-caption').textContent = `${what}${p.spec} — nav ${rows}×${cols}` + (p.ms ? `, computed and sent in ${Math.round(p.ms)} ms` : '') +
    (m ? `, ${m.done} of ${m.frames} frames` + (m.not_kept ? `, ${m.not_kept} not kept (NaN)` : '') + (m.no_frame ? `, ${m.no_frame} without a frame (NaN)` : '') : '');
}

function drawColorbar(lo, hi, cmap) {
  const c = $('colorbar');
  if (c.dataset.cmap !== cmap || c.width !== imageCanvas.width) { // drawn once per map and width
    c.width = imageCanvas.width;
    const img = new ImageData(c.width, c.height), L = lut(cmap);
    for (let i = 0; i < c.width; i++) {
      const k = Math.round(i / Math.max(1, c.width - 1) * 255);
      for (let y = 0; y < c.height; y++) img.data.set([L[3 * k], L[3 * k + 1], L[3 * k + 2], 255], 4 * (y * c.width + i));
    }
    c.getContext('2d').putImageData(img, 0, 0);
    c.dataset.cmap = cmap;
  }
  $('cb-lo').textContent = fmtVal(lo);
  $('cb-hi').textContent = fmtVal(hi);
}

for (const id of ['lo', 'hi']) $(id).addEventListener('change', () => { $('auto').checked = false; drawImage(); });
$('auto').addEventListener('change', () => { if ($('auto').checked && S.painted) { setLimits(); drawImage(); } });
$('cmap').addEventListener('change', drawImage);
$('com-part').addEventListener('change', () => {
  const p = S.painted;
  if (p && p.spec.startsWith('com')) paintImage(p.spec, { shape: p.shape, dtype: p.dtype, data: p.all }, undefined, p.ms, p.live);
});

// A click on the image shows the frame at that scan position on the left.
imageCanvas.addEventListener('click', (ev) => {
  if (!S.ready) return;
  const b = imageCanvas.getBoundingClientRect();
  const [rows, cols] = navRC();
  const x = Math.floor((ev.clientX - b.left) * imageCanvas.width / b.width / imageScale);
  const y = Math.floor((ev.clientY - b.top) * imageCanvas.height / b.height / imageScale);
  if (x < 0 || y < 0 || x >= cols || y >= rows) return;
  pickFrame(y, x);
});

async function pickFrame(y, x) {
  const q = S.info.nav_shape.length === 2 ? `y=${y}&x=${x}` : `x=${x}`;
  try {
    const a = await getArray('api/pick?' + q);
    S.frame = { kind: 'pick', y, x, shape: a.shape, data: a.data, seq: ++S.frameSeq };
    const opt = $('frame-kind').querySelector('option[value=pick]');
    opt.disabled = false;
    opt.textContent = `scan position (${y}, ${x})`;
    $('frame-kind').value = 'pick';
    drawFrame();
    drawImage();
  } catch (e) { showError(e.message); }
}

async function loadFrame(kind) {
  try {
    const a = await getArray('api/frame?kind=' + kind);
    S.frame = { kind, shape: a.shape, data: a.data, seq: ++S.frameSeq, frames: a.frames };
    drawFrame();
    drawImage();
  } catch (e) { showError(e.message); }
}

// ---------- export ----------
function safeName(spec) { return 'stemdot_view_' + spec.replace(/[^A-Za-z0-9.-]+/g, '_'); }

// exportNPY is the image as stemdot apply --out writes it: (nav..., 1) float32; for com,
// the shifts as apply --com-shifts writes them: (nav..., 2) float64, y then x.
function exportNPY() {
  const p = S.painted;
  const nav = S.info.nav_shape, n = nav.reduce((a, b) => a * b, 1);
  let descr, shape, body;
  if (p.spec.startsWith('com')) {
    descr = '<f8'; shape = [...nav, 2];
    const v = new Float64Array(2 * n);
    for (let i = 0; i < n; i++) { v[2 * i] = p.all[i]; v[2 * i + 1] = p.all[n + i]; }
    body = v;
  } else {
    descr = '<f4'; shape = [...nav, 1]; body = p.all;
  }
  let h = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${shape.join(', ')}${shape.length === 1 ? ',' : ''}), }`;
  const total = 10 + h.length + 1;
  h += ' '.repeat((64 - total % 64) % 64) + '\n';
  const out = new Uint8Array(10 + h.length + body.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, 1, 0, h.length & 0xff, h.length >> 8]);
  for (let i = 0; i < h.length; i++) out[10 + i] = h.charCodeAt(i);
  out.set(new Uint8Array(body.buffer, body.byteOffset, body.byteLength), 10 + h.length);
  return out;
}

function download(blob, name) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

$('export-npy').onclick = () => {
  if (S.painted) download(new Blob([exportNPY()], { type: 'application/octet-stream' }), safeName(S.painted.spec) + '.npy');
};
// The PNG export is the image as stemdot apply --png writes it (the server draws it):
// grey from the minimum to the maximum, scaled up to a short side of 256 pixels.
$('export-png').onclick = async () => {
  const p = S.painted;
  if (!p) return;
  const com = p.spec.startsWith('com');
  try {
    const r = await fetch(`api/png?spec=${encodeURIComponent(p.spec)}` + (com ? `&part=${p.part}` : ''));
    if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
    download(await r.blob(), safeName(p.spec) + (com ? '_' + ['y', 'x', 'magnitude'][p.part] : '') + '.png');
  } catch (e) { showError('PNG export: ' + e.message); }
};
$('copy-cmd').onclick = () => {
  const c = $('command');
  c.select();
  if (navigator.clipboard) navigator.clipboard.writeText(c.value).catch(() => document.execCommand('copy'));
};

function shellQuote(s) { return /^[A-Za-z0-9_.,:=+@%/-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }

// updateCommand shows the stemdot apply command of spec, the image shown.
function updateCommand(spec) {
  const out = safeName(spec);
  let c = `${S.info.command} --mask ${shellQuote(spec)} --out ${out}.npy`;
  if (spec.startsWith('com')) c += ` --com-shifts ${out}_shifts.npy`;
  $('command').value = c;
  S.command = c;
}

S.exportNPY = exportNPY;

// ---------- test hooks: where to click ----------
// framePoint is the client position of sig coordinate (x, y) on the frame canvas.
S.framePoint = (x, y) => {
  const b = frameCanvas.getBoundingClientRect();
  return [b.left + toCanvas(x) * b.width / frameCanvas.width, b.top + toCanvas(y) * b.height / frameCanvas.height];
};
// imagePoint is the client position of the centre of scan position (y, x) on the image.
S.imagePoint = (y, x) => {
  const b = imageCanvas.getBoundingClientRect();
  return [b.left + (x + 0.5) * imageScale * b.width / imageCanvas.width, b.top + (y + 0.5) * imageScale * b.height / imageCanvas.height];
};

// ---------- start ----------
async function start() {
  try {
    const r = await fetch('api/info');
    if (!r.ok) throw new Error(await r.text());
    S.info = await r.json();
  } catch (e) { showError('cannot read the dataset info: ' + e.message); return; }
  if (S.info.live) { startLive(); return; }
  const i = S.info;
  document.title = `stemdot view — ${i.file}`;
  $('info').textContent = `${i.file}: ${i.format}, nav ${i.nav_shape.join('×')}, sig ${i.sig_shape.join('×')}, ${i.dtype}, ` +
    `${i.frames} frames${i.roi_positions != null ? ' (ROI)' : ''}, ${(i.bytes / 1e9).toFixed(3)} GB, ${i.workers} worker${i.workers === 1 ? '' : 's'}`;
  showWarnings(i.warnings);
  if (!i.command) $('command').hidden = $('copy-cmd').hidden = true; // no file (stemdot.view of an array): no command
  S.det = defaultDetector('disk');
  const ev = new EventSource('api/events');
  ev.addEventListener('progress', (m) => {
    const p = JSON.parse(m.data);
    $('progress').max = Math.max(p.total, 1);
    $('progress').value = p.done;
    $('progress-text').textContent = `first pass: ${p.done} of ${p.total} frames`;
  });
  ev.addEventListener('ready', async (m) => {
    if (S.ready) return; // a reconnect
    const ready = JSON.parse(m.data);
    showWarnings(ready.warnings);
    S.centre = ready.centre; // the direct beam's disk in the sum frame: the default detector disk:auto
    if (S.centre) S.det = parseSpec('disk:auto');
    else showWarnings([ready.centre_note]);
    $('progress').hidden = true;
    $('progress-text').textContent = '';
    await loadFrame('sum');
    S.ready = true;
    detectorChanged(performance.now());
  });
  ev.addEventListener('failed', (m) => {
    $('progress').hidden = true;
    showError('the first pass failed: ' + JSON.parse(m.data).error);
    ev.close();
  });
  ev.onerror = () => {
    if (ev.readyState === EventSource.CLOSED || S.ready) showError('lost the connection to stemdot view (stopped?): restart it and open the URL it prints');
  };
  ev.onopen = () => { if (S.ready) $('error').hidden = true; };
}

// ---------- the live mode ----------
// The page follows the server's detector: a change here is posted (one request at a
// time, the newest waiting), a change from another page is taken over. Images come by
// long polling (api/live?after=N answers once an image newer than N is published).
let liveSetting = null, livePending = null, liveAckGen = 0, lastFrameLoad = 0, frameLoading = false;

async function setLiveDetector(spec) {
  if (liveSetting) { livePending = spec; return; }
  liveSetting = spec;
  setBusy(true);
  try {
    const r = await fetch('api/live/detector?spec=' + encodeURIComponent(spec), { method: 'POST' });
    const text = await r.text();
    if (!r.ok) throw new Error(text.trim() || r.statusText);
    liveAckGen = Math.max(liveAckGen, JSON.parse(text).gen);
  } catch (e) { showError(e.message, 'image'); setBusy(false); }
  liveSetting = null;
  if (livePending) { const p = livePending; livePending = null; setLiveDetector(p); }
}

function startLive() {
  S.live = true;
  const src = S.info.source;
  document.title = `stemdot view — ${src}`;
  $('info').textContent = `${src}: waiting for the acquisition's header`;
  $('command').hidden = $('copy-cmd').hidden = true;
  $('progress').title = 'frames received';
  const ev = new EventSource('api/events');
  ev.addEventListener('ready', async () => {
    if (S.ready) return; // a reconnect
    try {
      const r = await fetch('api/info');
      if (!r.ok) throw new Error(await r.text());
      S.info = await r.json();
    } catch (e) { showError('cannot read the acquisition info: ' + e.message); return; }
    const i = S.info;
    $('info').textContent = `${src}: ${i.format}, nav ${i.nav_shape.join('×')}, sig ${i.sig_shape.join('×')}, ${i.dtype}, ` +
      `${i.frames} frames, ${i.workers} worker${i.workers === 1 ? '' : 's'}, frames kept up to ${(i.keep / 2 ** 30).toFixed(1)} GiB`;
    showWarnings(i.warnings);
    S.det = parseSpec(i.spec);
    S.spec = specOf(S.det);
    await loadFrame('sum');
    S.ready = true;
    showDetector();
    liveLoop();
  });
  ev.addEventListener('failed', (m) => {
    showError('the acquisition did not start: ' + JSON.parse(m.data).error);
    ev.close();
  });
  ev.onerror = () => {
    if (ev.readyState === EventSource.CLOSED || S.ready) showError('lost the connection to stemdot view (stopped?): restart it and open the URL it prints');
  };
  ev.onopen = () => { if (S.ready) $('error').hidden = true; };
}

// showDetector shows S.det (the server's) without posting it.
function showDetector() {
  S.spec = specOf(S.det);
  if (document.activeElement !== $('spec')) $('spec').value = S.spec;
  $('det-type').value = S.det.type;
  drawFrame();
}

async function liveLoop() {
  for (;;) {
    try {
      const after = S.liveSeq;
      const r = await fetch(`api/live?after=${after}`);
      if (!r.ok) throw new Error((await r.text()).trim() || r.statusText);
      const buf = await r.arrayBuffer();
      const n = new DataView(buf).getUint32(0, true);
      const meta = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 4, n)));
      const off = Math.ceil((4 + n) / 8) * 8;
      const data = meta.dtype === 'f8' ? new Float64Array(buf, off) : new Float32Array(buf, off);
      S.liveSeq = meta.seq;
      showLive(meta, data, after);
    } catch (e) {
      showError('lost the connection to stemdot view (stopped?): ' + e.message, 'image'); // the next image takes it away
      await new Promise((ok) => setTimeout(ok, 1000));
    }
  }
}

// showLive shows image meta.seq, the page's after image after (0: none, its first).
function showLive(meta, data, after) {
  const prev = S.liveMeta;
  S.liveMeta = meta;
  if (meta.spec !== S.spec && !liveSetting && !S.dragging && meta.gen >= liveAckGen) {
    try { S.det = parseSpec(meta.spec); showDetector(); } catch (e) { /* a spec the page cannot draw: kept */ }
  }
  if (meta.error) showError(meta.error, 'image');
  setBusy(meta.spec !== S.spec || !meta.complete && meta.acquisition !== 'receiving');
  if (meta.dtype) paintImage(meta.spec, { shape: meta.shape, dtype: meta.dtype, data }, undefined, undefined, meta);
  const arrivals = after > 0 ? meta.arrivals : []; // the first image's frames came before the page
  requestAnimationFrame(() => {
    const now = performance.now();
    S.livePainted.push(now);
    for (const a of arrivals) S.liveLatencies.push(performance.timeOrigin + now - a);
    if (after > 0) S.liveDelivery.push(performance.timeOrigin + now - meta.published);
  });
  const end = { receiving: '', complete: '; acquisition complete', ended: '; the acquisition ended early: ' + (meta.end || '') }[meta.acquisition];
  $('progress').max = Math.max(meta.frames, 1);
  $('progress').value = meta.received;
  $('progress-text').textContent = `${meta.received} of ${meta.frames} frames received, ${meta.missing} missing` +
    (meta.late ? `, ${meta.late} late` : '') + (meta.stalls ? `, ${meta.stalls} stalls` : '') +
    (meta.acquisition === 'receiving' ? `, ${(meta.rate / 1000).toFixed(2)} kHz computed` : '') + end +
    (meta.not_kept_all ? `; ${meta.not_kept_all} frames not kept (budget ${(meta.keep / 2 ** 30).toFixed(1)} GiB, --keep): NaN for a detector moved now` : '');
  // The sum frame follows the frames received, twice a second and at the end.
  const ended = meta.acquisition !== 'receiving' && (!prev || prev.acquisition === 'receiving');
  const kind = $('frame-kind').value;
  if (kind !== 'pick' && !S.dragging && !frameLoading && (ended || performance.now() - lastFrameLoad > 500) && meta.received !== S.frame.frames) {
    lastFrameLoad = performance.now();
    frameLoading = true;
    loadFrame(kind).finally(() => { frameLoading = false; });
  }
}

function showWarnings(ws) {
  const ul = $('warnings');
  for (const w of ws || []) {
    if ([...ul.children].some((li) => li.textContent === w)) continue;
    const li = document.createElement('li');
    li.textContent = w;
    ul.appendChild(li);
  }
}

start();
