/** The strict JSON parser for untrusted headers: same values as JSON.parse where JSON.parse is right, errors where it is lax. */
import { describe, expect, it } from 'vitest';
import { StrictJsonError, parseStrictJson } from '../src/model/strict-json.js';

function error(text: string, maxDepth?: number): StrictJsonError {
  try {
    parseStrictJson(text, { maxDepth });
  } catch (err) {
    expect(err).toBeInstanceOf(StrictJsonError);
    return err as StrictJsonError;
  }
  throw new Error(`expected ${JSON.stringify(text)} to be rejected`);
}

describe('parseStrictJson', () => {
  it('agrees with JSON.parse on valid JSON', () => {
    for (const text of [
      '{"a":[1,-2.5e3,0.1,true,false,null],"b":{"c":"\\u00e9\\n\\"\\\\\\/"},"d":[]}',
      ' [ {} , [ ] , "" , -0 , 1E+2 ] ',
      '"\\ud83d\\ude00 plain"',
      '12345678901234567890',
    ]) {
      expect(parseStrictJson(text)).toEqual(JSON.parse(text));
    }
  });

  it('objects have a null prototype; "__proto__" is an own data key', () => {
    const v = parseStrictJson('{"__proto__":{"polluted":1},"constructor":"x"}') as Record<string, unknown>;
    expect(Object.getPrototypeOf(v)).toBe(null);
    expect(Object.keys(v)).toEqual(['__proto__', 'constructor']);
    expect(v['__proto__']).toEqual({ polluted: 1 });
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('duplicate keys at any depth are errors that name the key and where it is', () => {
    const top = error('{"a":1, "a":2}');
    expect(top.message).toBe('duplicate key "a" at character 8');
    expect(top.duplicateKey).toBe('a');
    expect(top.path).toEqual([]);
    const nested = error('{"x":{"y":[{"k":1,"\\u006b":2}]}}');
    expect(nested.message).toMatch(/^duplicate key "k" at character \d+ \(in "x" → "y" → \[0\]\)$/);
    expect(nested.path).toEqual(['x', 'y', '[0]']);
  });

  it('nesting beyond maxDepth is an error, not a RangeError', () => {
    expect(error(`${'['.repeat(100_000)}${']'.repeat(100_000)}`).message).toBe(
      'nesting deeper than 64 levels at character 64 (in [0] → [0] → [0] → … → [0] → [0])',
    );
    expect(parseStrictJson('[[1]]', { maxDepth: 2 })).toEqual([[1]]);
    expect(error('[[[1]]]', 2).message).toMatch(/^nesting deeper than 2 levels at character 2/);
  });

  it('what JSON.parse rejects is rejected, with a position', () => {
    for (const [text, msg] of [
      ['', /unexpected end of JSON at character 0/],
      ['{"a":1,}', /unexpected "}" at character 7/],
      ['[1 2]', /unexpected "2" at character 3/],
      ['"a\tb"', /raw control character in a string/],
      ['"\\x"', /bad escape/],
      ['"\\u12g4"', /bad \\u escape/],
      ['01', /unexpected "1" after the JSON value at character 1/],
      ['{"a" 1}', /unexpected "1" at character 5/],
      ['"abc', /unterminated string at character 0/],
      ['-', /unexpected "-" at character 0/],
      ['nul', /unexpected "n" at character 0/],
    ] as const) {
      expect(() => JSON.parse(text)).toThrow(SyntaxError);
      expect(error(text).message).toMatch(msg);
    }
  });
});
