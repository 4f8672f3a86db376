/**
 * Vega-Lite spec → SVG (vega-lite compiles, vega renders headless with `toSVG()`, no
 * canvas) → PNG (@resvg/resvg-js, a prebuilt binary inside its npm package: no system
 * packages, nothing downloaded at install time beyond npm).
 */
import { Resvg } from '@resvg/resvg-js';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { VlSpec } from './plot-specs.js';

export async function renderSvg(spec: VlSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec as unknown as TopLevelSpec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** PNG bytes of an SVG at `scale` times its size, on white. */
export function svgToPng(svg: string, scale = 2): Buffer {
  return new Resvg(svg, { background: 'white', fitTo: { mode: 'zoom', value: scale } }).render().asPng();
}
