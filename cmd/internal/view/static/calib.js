// stemdot view: calibrations (issue #35). Loaded after app.js, whose drawFrame and
// drawImage it wraps: a scale bar on the frame (the detector's calibration, info's
// calibration.sig) and on the virtual image (the scan step, calibration.nav) where the
// file states one, and under each view the pixel or scan position under the cursor, its
// calibrated coordinates and its value. The readouts are also in window.stemdotView
// (readout.frame, readout.image) for the browser tests.
'use strict';

S.readout = { frame: '', image: '' };

// In a function of its own: no name here clashes with app.js's.
(() => {
  // cal is the calibration section of /api/info ({} before it is read or when none).
  const cal = () => (S.info && S.info.calibration) || {};

  // known is axis a when it has a scale, else null.
  const known = (a) => (a && a.scale ? a : null);

  // at is index i on axis a: "12.8 nm", or '' when a is not calibrated.
  function at(a, i) {
    a = known(a);
    return a ? `${fmtVal((a.offset || 0) + i * a.scale)} ${a.units || ''}`.trim() : '';
  }

  // niceLength is the 1, 2 or 5 × 10^k nearest below v (> 0).
  function niceLength(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    return [5, 2, 1].map((m) => m * p).find((l) => l <= v) || p;
  }

  // scaleBar draws on canvas c, at k canvas pixels per data pixel, a bar along axis a of
  // about a fifth of n pixels, labelled with its length: nothing when a is not calibrated.
  function scaleBar(c, k, n, a) {
    a = known(a);
    if (!a || !(n > 0)) return;
    const len = niceLength(Math.abs(a.scale) * n / 5), w = len / Math.abs(a.scale) * k;
    const g = c.getContext('2d'), x = 10, y = c.height - 12;
    const label = `${fmtVal(len)} ${a.units || ''}`.trim();
    g.save();
    g.font = '12px system-ui, sans-serif';
    g.fillStyle = 'rgba(0, 0, 0, 0.55)';
    g.fillRect(x - 4, y - 18, Math.max(w, g.measureText(label).width) + 8, 26);
    g.fillStyle = '#fff';
    g.fillRect(x, y, w, 4);
    g.fillText(label, x, y - 5);
    g.restore();
    return label;
  }

  // readoutLine is under-the-cursor text: the indices (px), the calibrated coordinates
  // where known, the value.
  function readoutLine(names, idx, axes, v) {
    const px = names.map((n, i) => `${n} ${idx[i]}`).join(', ');
    const c = idx.map((i, j) => at(axes[j], i));
    const calibrated = c.some((s) => s) ? ` (${names.map((n, i) => `${n} ${c[i] || '–'}`).join(', ')})` : '';
    return `${px}${calibrated}: ${fmtVal(v)}`;
  }

  // place puts a readout line below canvas c.
  function place(c, id) {
    let el = document.getElementById(id);
    if (!el) {
      el = document.createElement('div');
      el.id = id;
      el.className = 'readout';
      c.insertAdjacentElement('afterend', el);
    }
    return el;
  }

  const drawFrameBare = drawFrame, drawImageBare = drawImage;
  drawFrame = function () {
    drawFrameBare();
    if (S.frame) S.frameBar = scaleBar(frameCanvas, frameScale, sigShape()[1], (cal().sig || [])[1]);
  };
  drawImage = function () {
    drawImageBare();
    if (!S.painted) return;
    const nav = cal().nav || [];
    S.imageBar = scaleBar(imageCanvas, imageScale, navRC()[1], nav[nav.length - 1]);
  };

  // cell is the data pixel (row, column) under the mouse event ev on canvas c of k canvas
  // pixels per data pixel and rows × cols pixels, or null outside.
  function cell(ev, c, k, rows, cols) {
    const b = c.getBoundingClientRect();
    const x = Math.floor((ev.clientX - b.left) * c.width / b.width / k);
    const y = Math.floor((ev.clientY - b.top) * c.height / b.height / k);
    return x < 0 || y < 0 || x >= cols || y >= rows ? null : [y, x];
  }

  frameCanvas.addEventListener('mousemove', (ev) => {
    if (!S.frame) return;
    const [sy, sx] = sigShape(), p = cell(ev, frameCanvas, frameScale, sy, sx);
    const sig = cal().sig || [];
    S.readout.frame = p ? readoutLine(['y', 'x'], p, sig, S.frame.data[p[0] * sx + p[1]]) : '';
    place(frameCanvas, 'frame-readout').textContent = S.readout.frame;
  });

  imageCanvas.addEventListener('mousemove', (ev) => {
    if (!S.painted) return;
    const [rows, cols] = navRC(), p = cell(ev, imageCanvas, imageScale, rows, cols);
    const nav = cal().nav || [], oneRow = S.info.nav_shape.length !== 2;
    const v = p ? S.painted.data[p[0] * cols + p[1]] : 0;
    S.readout.image = !p ? '' : oneRow ? readoutLine(['x'], [p[1]], [nav[0]], v) : readoutLine(['y', 'x'], p, nav, v);
    place(imageCanvas, 'image-readout').textContent = S.readout.image;
  });

  // The readout lines take their place at once, so that nothing moves when they fill.
  place(frameCanvas, 'frame-readout');
  place(imageCanvas, 'image-readout');

  for (const c of [frameCanvas, imageCanvas]) {
    c.addEventListener('mouseleave', () => {
      const id = c === frameCanvas ? 'frame' : 'image';
      S.readout[id] = '';
      place(c, id + '-readout').textContent = '';
    });
  }
})();
