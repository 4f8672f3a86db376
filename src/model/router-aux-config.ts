/**
 * The router load-balancing loss fields of a Qwen3-MoE / Qwen3.5-MoE config.json
 * (`output_router_logits`, `router_aux_loss_coef`), as Transformers reads them: with
 * `output_router_logits` true, Qwen3MoeForCausalLM / Qwen3_5MoeForCausalLM add
 * `router_aux_loss_coef · load_balancing_loss` to the loss whenever labels are given
 * (router-aux-loss.ts computes it). Hub configs carry the coefficient even when the flag
 * is false; it is then unused.
 */

type Fail = (msg: string, extra?: Record<string, unknown>) => never;

/** Transformers' default router_aux_loss_coef of the Qwen3-MoE and Qwen3.5-MoE configs. */
export const DEFAULT_ROUTER_AUX_LOSS_COEF = 0.001;

/** The coefficient the training loss adds the aux loss with, or undefined when `output_router_logits` is off. */
export function parseRouterAuxLoss(t: Record<string, unknown>, modelType: string, fail: Fail): number | undefined {
  const on = t.output_router_logits;
  if (on !== undefined && on !== null && typeof on !== 'boolean') {
    fail(`field "output_router_logits" is ${JSON.stringify(on)}; expected true or false for ${modelType}. HINT: true adds the router load-balancing loss.`, {
      field: 'output_router_logits',
    });
  }
  if (on !== true) return undefined;
  const coef = t.router_aux_loss_coef ?? DEFAULT_ROUTER_AUX_LOSS_COEF;
  if (typeof coef !== 'number' || !Number.isFinite(coef) || coef < 0) {
    fail(
      `field "router_aux_loss_coef" is ${JSON.stringify(coef)}; expected a finite number >= 0 for ${modelType} with output_router_logits true. HINT: Transformers' default is ${DEFAULT_ROUTER_AUX_LOSS_COEF}.`,
      { field: 'router_aux_loss_coef' },
    );
  }
  return coef as number;
}

/** The config.json fields of a coefficient parseRouterAuxLoss returned (nothing when off). */
export function routerAuxHFFields(coef: number | undefined): Record<string, unknown> {
  return coef === undefined ? {} : { output_router_logits: true, router_aux_loss_coef: coef };
}
