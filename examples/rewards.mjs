// examples/rewards.mjs — a stateless task for the World's Piscina pool: scores a sample
// against its target, 1 for an exact match, else the share of matching characters.
export function score(sample) {
  const { completion, target } = sample;
  if (completion === target) return 1;
  let same = 0;
  for (let i = 0; i < Math.min(completion.length, target.length); i++) if (completion[i] === target[i]) same++;
  return same / Math.max(completion.length, target.length, 1);
}
