/**
 * Renders a tokenizer_config.json `chat_template` with @huggingface/jinja the way
 * transformers' `apply_chat_template` does: `messages`, `add_generation_prompt`,
 * the tokenizer's special tokens (`bos_token`, `eos_token`, `pad_token`,
 * `unk_token`) in the context, `raise_exception(msg)` (built into
 * @huggingface/jinja; its message is kept in the error), plus any extra kwargs
 * (e.g. `enable_thinking`) as top-level template variables.
 */
import { Template } from '@huggingface/jinja';
import { join } from 'node:path';
import { ConfigError, InvalidArgumentError } from '../runtime/errors.js';
import type { LoadedTokenizer } from './tokenizer.js';

export interface ChatMessage {
  role: string;
  content: string;
  [key: string]: unknown;
}

export interface ChatTemplateOptions {
  addGenerationPrompt?: boolean;
  /** Extra template variables, e.g. `{ enable_thinking: false }`. */
  kwargs?: Record<string, unknown>;
}

export class ChatTemplate {
  private readonly template: Template;
  private readonly specials: Record<string, string | undefined>;

  constructor(
    readonly source: string,
    readonly file: string,
    specials: Record<string, string | undefined> = {},
  ) {
    this.specials = specials;
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new ConfigError(
        `${file}: chat_template does not parse: ${(err as Error).message}. HINT: fix the Jinja syntax of chat_template.`,
        { path: file },
        { cause: err },
      );
    }
  }

  /** The tokenizer's chat template; errors if tokenizer_config.json has none. */
  static fromTokenizer(tok: LoadedTokenizer): ChatTemplate {
    const file = join(tok.dir, 'tokenizer_config.json');
    if (tok.chatTemplate === undefined) {
      throw new ConfigError(
        `${file} has no chat_template (a string). HINT: use a chat/instruct model, or a \`prompt\` column with plain text instead of \`messages\`.`,
        { path: file },
      );
    }
    const cfg = tok.config as Record<string, unknown>;
    const unk = typeof cfg.unk_token === 'string' ? cfg.unk_token : undefined;
    return new ChatTemplate(tok.chatTemplate, file, { bos_token: tok.bosToken, eos_token: tok.eosToken, pad_token: tok.padToken, unk_token: unk });
  }

  render(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    if (!Array.isArray(messages) || messages.length === 0) {
      throw new InvalidArgumentError('A chat needs at least one message ({ role, content }). HINT: pass a non-empty messages list.');
    }
    messages.forEach((m, i) => {
      if (!m || typeof m.role !== 'string' || typeof m.content !== 'string') {
        throw new InvalidArgumentError(`messages[${i}] must be { role: string, content: string }, got ${JSON.stringify(m)}. HINT: fix the messages list.`);
      }
    });
    const ctx: Record<string, unknown> = {
      ...this.specials,
      ...opts.kwargs,
      messages,
      add_generation_prompt: opts.addGenerationPrompt ?? false,
    };
    for (const k of Object.keys(ctx)) if (ctx[k] === undefined) delete ctx[k];
    try {
      return this.template.render(ctx);
    } catch (err) {
      throw new ConfigError(
        `${this.file}: rendering chat_template failed: ${(err as Error).message}. HINT: check the messages and template kwargs.`,
        { path: this.file },
        { cause: err },
      );
    }
  }
}
