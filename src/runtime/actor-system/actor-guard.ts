/**
 * What an exposed actor answers to a method it does not have. Comlink would read
 * `obj[method]` as undefined and fail with "Cannot read properties of undefined
 * (reading 'apply')"; the guard answers with an InvalidArgumentError naming the
 * actor, the method and the methods it has.
 */
import { InvalidArgumentError } from '../errors.js';
import { profiler } from '../profiler.js';

/** Callable members of `obj`, own and inherited (not Object's own, not the constructor). */
export function actorMethods(obj: object): string[] {
  const names = new Set<string>();
  for (let p: object | null = obj; p && p !== Object.prototype && p !== Function.prototype; p = Object.getPrototypeOf(p)) {
    for (const key of Object.getOwnPropertyNames(p)) {
      if (key === 'constructor' || key.startsWith('#')) continue;
      const d = Object.getOwnPropertyDescriptor(p, key);
      if (d && typeof d.value === 'function') names.add(key);
    }
  }
  return [...names].sort();
}

/** A view of `obj` on which an unknown member is a function that throws a clear error. */
export function guardActor<T extends object>(obj: T, actor: string, rank: number): T {
  // Members run on the object itself, never on the proxy: `#private` fields and
  // getters need the real `this`.
  const bound = new Map<string | symbol, { fn: unknown; wrapped: unknown }>();
  return new Proxy(obj, {
    get(target, prop) {
      if (typeof prop !== 'string' || prop in target) {
        const value = Reflect.get(target, prop, target);
        if (typeof value !== 'function') return value;
        const hit = bound.get(prop);
        if (hit?.fn === value) return hit.wrapped;
        const fn = (value as (...a: unknown[]) => unknown).bind(target);
        const wrapped = (...args: unknown[]) => {
          const end = profiler()?.begin('actor', `${actor}.${String(prop)} (run on rank ${rank})`);
          if (!end) return fn(...args);
          try {
            const r = fn(...args);
            if (r instanceof Promise) r.then(end, end);
            else end();
            return r;
          } catch (e) {
            end();
            throw e;
          }
        };
        bound.set(prop, { fn: value, wrapped });
        return wrapped;
      }
      return () => {
        const methods = actorMethods(target);
        throw new InvalidArgumentError(
          `Actor ${actor} on rank ${rank} has no method ${JSON.stringify(prop)} (its methods: ${methods.join(', ') || 'none'}). HINT: check the method name and that the actor's class defines it.`,
          { actor, rank, method: prop, methods },
        );
      };
    },
  });
}
