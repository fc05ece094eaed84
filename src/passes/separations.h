// Why fusion kept groups apart: the decisions the fusion pass records as it makes them, and the plan's
// separations (Plan::separations, `kiln plan --explain`) built from them once the groups are final.
//
// The fuser's join tests return an Apart (a rule and up to two details) instead of a bool; every refusal
// is noted against the pair (consumer node, producer node) it was about. When the groups are final, every
// tensor written by one kernel group and read by another gets a Separation: the last note made about the
// pair (a layout conversion first refused as its producer's store is then refused as its reader's load:
// the later decision is the one that kept them apart), or, when fusion noted nothing, an honest fallback
// naming the two kinds of group (rule `unrecorded`). The reasons are never re-derived from the rules.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/plan.h"

namespace kiln {

struct Uses;

// A join test's verdict: may join (`apart` false), or the rule that said no and its details. What `a` and
// `b` hold is per rule (see `reason_text` in separations.cpp): a node, a tensor id, a group kind or a count.
struct Apart {
  bool apart = false;
  SeparationRule rule = SeparationRule::unrecorded;
  int32_t a = -1, b = -1;
  explicit operator bool() const { return apart; }
};
inline Apart kept_apart(SeparationRule rule, int32_t a = -1, int32_t b = -1) { return {true, rule, a, b}; }

// The refusals of one fusion run, noted as they are made (cheap: three integers and the verdict each).
class FusionNotes {
 public:
  void note(int32_t consumer, int32_t producer, Apart why) {
    notes_.push_back({consumer, producer, static_cast<int32_t>(notes_.size()), why});
  }
  // Sorts the notes for find(); call once, after the last note.
  void finish();
  // The last note made about (consumer node, producer node), or null.
  const Apart* find(int32_t consumer, int32_t producer) const;

 private:
  struct Note {
    int32_t consumer, producer, seq;
    Apart why;
  };
  std::vector<Note> notes_;
};

// Fills plan.separations from the final groups (plan.groups, in execution order) and the notes.
void explain_separations(Plan& plan, const Uses& uses, const FusionNotes& notes, int max_group_ops);

}  // namespace kiln
