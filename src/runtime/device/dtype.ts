/**
 * Element types of device tensors. The numeric codes are the native `DType` enum
 * (native/kernels/dtype.h) and must stay in sync with it.
 */
import { InvalidArgumentError } from '../errors.js';

export const DTYPES = ['fp32', 'bf16', 'fp16', 'int32', 'int64', 'uint8'] as const;
export type DType = (typeof DTYPES)[number];

export const DTYPE_CODE: Readonly<Record<DType, number>> = { fp32: 0, bf16: 1, fp16: 2, int32: 3, int64: 4, uint8: 5 };

const SIZES: Readonly<Record<DType, number>> = { fp32: 4, bf16: 2, fp16: 2, int32: 4, int64: 8, uint8: 1 };

const ALIASES: Record<string, DType> = {
  float32: 'fp32',
  float: 'fp32',
  f32: 'fp32',
  bfloat16: 'bf16',
  float16: 'fp16',
  half: 'fp16',
  f16: 'fp16',
  int: 'int32',
  i32: 'int32',
  long: 'int64',
  i64: 'int64',
  u8: 'uint8',
  byte: 'uint8',
};

export function dtypeSize(dtype: DType): number {
  return SIZES[dtype];
}

export function isFloatDType(dtype: DType): boolean {
  return dtype === 'fp32' || dtype === 'bf16' || dtype === 'fp16';
}

export function isDType(value: unknown): value is DType {
  return typeof value === 'string' && (DTYPES as readonly string[]).includes(value);
}

/** Validates a user-supplied dtype; the message names the argument and suggests the spelling. */
export function checkDType(value: unknown, what = 'dtype'): DType {
  if (isDType(value)) return value;
  const alias = typeof value === 'string' ? ALIASES[value.toLowerCase()] : undefined;
  const hint = alias ? ` HINT: did you mean '${alias}'?` : '';
  throw new InvalidArgumentError(`Expected one of ${DTYPES.join(', ')} for ${what} but received ${describe(value)}.${hint}`, {
    argument: what,
    value: String(value),
  });
}

/** "'float32' of type string", "-1 of type number": what sharp-style messages say was received. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return `'${value}' of type string`;
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of length ${value.length}`;
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'Object'})`;
  return `${String(value)} of type ${typeof value}`;
}

/** The precisions a trainer or an engine is asked for by name (HF's torch_dtype spelling). */
export const PRECISIONS = ['float32', 'bfloat16'] as const;
export type Precision = (typeof PRECISIONS)[number];

/**
 * Checks a precision option; undefined is 'float32'. `what` names the option as the caller
 * spells it and `hint` says what each choice means for that component.
 */
export function checkPrecision(value: unknown, what: string, hint: string): Precision {
  if (value === undefined) return 'float32';
  if (typeof value === 'string' && (PRECISIONS as readonly string[]).includes(value)) return value as Precision;
  throw new InvalidArgumentError(`Expected ${what} to be 'float32' or 'bfloat16' but received ${describe(value)}. HINT: ${hint}`, { argument: what });
}
