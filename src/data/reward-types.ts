/** What every reward function receives and returns (structured-clonable; it runs in a pool thread). */
export interface RewardInput {
  /** Prompt texts (chat template applied), one per sample. */
  prompts: string[];
  /** Prompt token ids, one list per sample. */
  promptIds: number[][];
  /** Completion texts (decoded, special tokens kept out), one per sample. */
  completions: string[];
  completionIds: number[][];
  /** Why each completion ended: 'stop' (an EOS id) or 'length' (hit max tokens), as the engine reports. */
  finishReasons: string[];
  /** The dataset's other columns of each sample's row. */
  columns: Record<string, unknown>[];
  /** Built-ins only: their options from the reward spec. */
  options?: Record<string, unknown>;
}

/** One number per sample, or null where the reward does not apply (skipped in the weighted sum). */
export type RewardValues = (number | null)[];
