/**
 * The router's auxiliary (load-balancing) loss of the HF MoE models (`output_router_logits`,
 * `router_aux_loss_coef`) is a training objective Ascent does not add. RL recipes train MoE
 * models without it, but a config that asks for it must not train silently without it.
 */
export function refuseRouterAuxLoss(t: Record<string, unknown>, modelType: string, fail: (msg: string, extra?: Record<string, unknown>) => never): void {
  const v = t.output_router_logits;
  if (v === undefined || v === null || v === false) return;
  fail(
    `field "output_router_logits" is ${JSON.stringify(v)}; the router auxiliary (load-balancing) loss is not implemented for ${modelType}. HINT: set it to false (router_aux_loss_coef is then unused).`,
    { field: 'output_router_logits' },
  );
}
