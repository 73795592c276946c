"""The script and style of ``explorer.html`` (:mod:`~cel_lens.report.explorer_page`): plain
JavaScript over plotly.js, reading the page's embedded JSON; no server, no other library."""

from __future__ import annotations

__all__ = ["PAGE_SCRIPT", "PAGE_STYLE"]

PAGE_STYLE = """
body{font-family:Helvetica,Arial,sans-serif;font-size:13px;margin:12px;color:#222}
#cel-main{display:flex;gap:16px;align-items:flex-start}#cel-right{min-width:560px;max-width:700px}
.cel-rows th{text-align:left;font-weight:normal;color:#555;padding-right:10px}.cel-rows td{font-weight:bold}
.cel-logit td,.cel-logit th{padding:2px 8px;text-align:right}.cel-prompt{white-space:pre-wrap;background:#f6f6f6;padding:4px;max-height:8em;overflow:auto}
.cel-seal{color:#7a5a00}.cel-title{margin:8px 0 4px}#cel-precomputed{color:#555;max-width:1300px}
"""

PAGE_SCRIPT = r"""
(function () {
  const D = JSON.parse(document.getElementById('cel-data').textContent);
  const heat = document.getElementById('cel-heatmap');
  const sets = document.getElementById('cel-sets');
  const pick = document.getElementById('cel-model-example');
  const unit = D.unit;  // the scorer's own (Scorer.score_unit), as the Python panels write it
  function fmt(v) {
    if (v === null || v === undefined) return 'not scored';
    const x = unit.scale * v;
    return (x >= 0 ? '+' : '') + x.toFixed(unit.decimals) + (unit.symbol ? ' ' + unit.symbol : '');
  }
  function esc(s) { const d = document.createElement('div'); d.textContent = s; return d.innerHTML; }
  function wireExamples(box) {
    box.querySelectorAll('.cel-browse').forEach(function (b) {
      const sel = b.querySelector('.cel-example-select');
      sel.addEventListener('change', function () {
        const [kind, i] = sel.value.split(':');
        b.querySelectorAll('.cel-example').forEach(function (e) {
          e.hidden = !(e.dataset.kind === kind && e.dataset.i === i);
        });
      });
      sel.dispatchEvent(new Event('change'));
    });
  }
  function drawModel(p, i) {
    const html = document.getElementById('cel-model-html');
    const blocks = (p && p.model) || [];
    document.getElementById('cel-model-pick').hidden = blocks.length === 0;
    if (blocks.length === 0) {
      html.innerHTML = '<p class="cel-no-model">No model panel for this head set on this page.</p>';
      Plotly.purge('cel-attention'); Plotly.purge('cel-logit');
      return;
    }
    const b = blocks[i];
    html.innerHTML = b.html;
    Plotly.react('cel-logit', b.logit.data, b.logit.layout, {displaylogo: false, displayModeBar: false});
    Plotly.react('cel-attention', b.attention.data, b.attention.layout, {displaylogo: false, displayModeBar: false});
  }
  function show(key) {
    const box = document.getElementById('cel-panel');
    document.getElementById('cel-current').textContent = key;
    const p = D.panels[key];
    if (p) {
      sets.value = key;
      box.innerHTML = p.html;
      wireExamples(box);
      pick.innerHTML = p.model.map(function (b, i) { return '<option value="' + i + '">' + esc(String(b.id)) + '</option>'; }).join('');
      drawModel(p, 0);
      return;
    }
    const m = /^L(\d+)H(\d+)$/.exec(key);
    const v = m ? D.scores[+m[1]][+m[2]] : null;
    box.innerHTML = '<div class="cel-panel" data-heads="' + esc(key) + '"><h3 class="cel-title">' + esc(key) +
      ' (not precomputed)</h3><table class="cel-rows"><tr data-row="score_' + esc(key) + '"><th>stage-1 score of ' + esc(key) +
      ' (' + esc(D.scorer) + ')</th><td class="cel-value" data-value="' + v + '">' + fmt(v) + '</td></tr></table>' +
      '<p>This page holds panels for ' + D.order.length + ' head sets (see above); this head shows its stage-1 score only.</p></div>';
    drawModel(null, 0);
  }
  Plotly.newPlot(heat, D.heatmap.data, D.heatmap.layout, {displaylogo: false, displayModeBar: false}).then(function () {
    heat.on('plotly_click', function (ev) {
      const pt = ev.points[0];
      show('L' + Math.round(pt.y) + 'H' + Math.round(pt.x));
    });
    window.celExplorerReady = true;
  });
  sets.addEventListener('change', function () { show(sets.value); });
  pick.addEventListener('change', function () { drawModel(D.panels[sets.value], +pick.value); });
  if (D.order.length) show(D.order[0]);
  window.celShow = show;
})();
"""
