/**
 * A strict JSON parser for untrusted file headers (safetensors headers, shard indexes,
 * trainer state). Unlike JSON.parse it:
 * - rejects a key that appears twice in one object (JSON.parse silently keeps the last);
 * - rejects nesting deeper than `maxDepth` with an error instead of a RangeError;
 * - builds objects with a null prototype, so keys such as "__proto__", "constructor" or
 *   "toString" are plain data and can neither reach nor shadow Object.prototype.
 * Every problem is a StrictJsonError naming what was wrong and where (character offset and
 * the key path), never another error class.
 */

export class StrictJsonError extends Error {
  constructor(
    message: string,
    /** Character offset of the problem. */
    readonly position: number,
    /** Keys (and `[i]` array indices) leading to the value at fault; empty at the top level. */
    readonly path: readonly string[],
    /** The key given twice, for a duplicate-key error. */
    readonly duplicateKey?: string,
  ) {
    super(message);
    this.name = 'StrictJsonError';
  }
}

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
/** An object with a null prototype: read it with Object.hasOwn / Object.entries only. */
export interface JsonObject {
  [key: string]: JsonValue;
}

export interface StrictJsonOptions {
  /** Deepest nesting of arrays and objects accepted (default 64). */
  maxDepth?: number;
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);
const ESCAPES: Readonly<Record<string, string>> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' };
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

/** A plain JSON object (not an array, not null). */
export function isJsonObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function parseStrictJson(text: string, opts: StrictJsonOptions = {}): JsonValue {
  const maxDepth = opts.maxDepth ?? 64;
  let i = 0;
  const path: string[] = [];
  const where = () => {
    if (!path.length) return '';
    const shown = path.map((k) => (k.startsWith('[') ? k : JSON.stringify(k)));
    return ` (in ${shown.length > 6 ? [...shown.slice(0, 3), '…', ...shown.slice(-2)].join(' → ') : shown.join(' → ')})`;
  };
  const fail = (msg: string, at = i, duplicateKey?: string): never => {
    throw new StrictJsonError(`${msg} at character ${at}${where()}`, at, [...path], duplicateKey);
  };
  const skipWs = () => {
    while (i < text.length && WS.has(text.charCodeAt(i))) i++;
  };
  const unexpected = (): never => fail(i >= text.length ? 'unexpected end of JSON' : `unexpected ${JSON.stringify(text[i])}`);

  const parseString = (): string => {
    const start = i;
    i++; // opening quote
    let out = '';
    let run = i;
    for (;;) {
      if (i >= text.length) fail('unterminated string', start);
      const c = text.charCodeAt(i);
      if (c === 0x22) break;
      if (c < 0x20) fail('raw control character in a string (escape it)');
      if (c !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(run, i);
      const e = text[i + 1];
      if (e === 'u') {
        const hex = text.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) fail('bad \\u escape');
        out += String.fromCharCode(parseInt(hex, 16));
        i += 6;
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
        i += 2;
      } else {
        fail('bad escape in a string');
      }
      run = i;
    }
    out += text.slice(run, i);
    i++; // closing quote
    return out;
  };

  const parseValue = (depth: number): JsonValue => {
    skipWs();
    const c = text[i];
    if (c === '{' || c === '[') {
      if (depth >= maxDepth) fail(`nesting deeper than ${maxDepth} levels`);
      return c === '{' ? parseObject(depth + 1) : parseArray(depth + 1);
    }
    if (c === '"') return parseString();
    if (text.startsWith('true', i)) return ((i += 4), true);
    if (text.startsWith('false', i)) return ((i += 5), false);
    if (text.startsWith('null', i)) return ((i += 4), null);
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (m && m[0] !== '' && m[0] !== '-') {
      i += m[0].length;
      return Number(m[0]);
    }
    return unexpected();
  };

  const parseArray = (depth: number): JsonValue[] => {
    i++;
    const out: JsonValue[] = [];
    skipWs();
    if (text[i] === ']') return (i++, out);
    for (;;) {
      path.push(`[${out.length}]`);
      out.push(parseValue(depth));
      path.pop();
      skipWs();
      if (text[i] === ',') i++;
      else if (text[i] === ']') return (i++, out);
      else unexpected();
    }
  };

  const parseObject = (depth: number): JsonObject => {
    i++;
    const out = Object.create(null) as JsonObject;
    skipWs();
    if (text[i] === '}') return (i++, out);
    for (;;) {
      skipWs();
      if (text[i] !== '"') unexpected();
      const keyAt = i;
      const key = parseString();
      if (Object.hasOwn(out, key)) fail(`duplicate key ${JSON.stringify(key)}`, keyAt, key);
      skipWs();
      if (text[i] !== ':') unexpected();
      i++;
      path.push(key);
      const value = parseValue(depth);
      path.pop();
      Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
      skipWs();
      if (text[i] === ',') i++;
      else if (text[i] === '}') return (i++, out);
      else unexpected();
    }
  };

  const value = parseValue(0);
  skipWs();
  if (i < text.length) fail(`unexpected ${JSON.stringify(text[i])} after the JSON value`);
  return value;
}
