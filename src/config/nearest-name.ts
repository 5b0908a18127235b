// The "did you mean" of config errors: the allowed name closest to a misspelt one.

/**
 * Returns the candidate closest to `word` by edit distance (insert, delete, substitute, or swap
 * two neighbours, each costing 1), when it is close enough to be a plausible typo: at most 1
 * edit for words up to 4 characters, else at most a third of the word's length (so
 * `requets_per_unit` → `requests_per_unit`, `fortnight` → nothing). Ties go to the earlier
 * candidate; an exact match is not a suggestion.
 *
 * @returns the suggestion, or undefined when no candidate is close
 */
export function nearestName(
  word: string,
  candidates: Iterable<string>,
): string | undefined {
  const folded = word.toLowerCase();
  const limit = folded.length <= 4 ? 1 : Math.floor(folded.length / 3);
  let best: string | undefined;
  let bestDistance = limit + 1;
  for (const candidate of candidates) {
    const distance = editDistance(folded, candidate.toLowerCase());
    if (distance > 0 && distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

/** Optimal string alignment distance (Levenshtein plus adjacent transpositions). */
function editDistance(a: string, b: string): number {
  // Three rows of the dynamic-programming table: i-2, i-1 and i.
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let value = Math.min(
        previous[j]! + 1,
        current[j - 1]! + 1,
        previous[j - 1]! + cost,
      );
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        value = Math.min(value, before[j - 2]! + 1);
      }
      current.push(value);
    }
    before = previous;
    previous = current;
  }
  return previous[b.length]!;
}
