// Every section, in report order: the spec's, then those beyond it.
import type { Section } from "../model.js";
import { accuracyBeyondSections, accuracySections } from "./accuracy.js";
import { beyondSections } from "./beyond.js";
import { decisionSections } from "./decision.js";
import { matchingSections } from "./matching.js";
import { reloadSections } from "./reload.js";
import { ruleSections } from "./rules.js";

/** All sections of the suite. */
export const allSections: readonly Section[] = [
  ...matchingSections,
  ...ruleSections,
  ...decisionSections,
  ...reloadSections,
  ...accuracySections,
  ...beyondSections,
  ...accuracyBeyondSections,
];
