/*
 * Draft-model speculation (spec_draft.c): what tests and diagnostics may
 * read of it. The strategy itself is ifl_decoding_draft (decoding.h).
 */
#ifndef IFL_RUNTIME_SPEC_DRAFT_H
#define IFL_RUNTIME_SPEC_DRAFT_H

#include "runtime/kvcache.h"

struct ifl_executor;

/* The draft model's KV block figures (n_used: blocks sequences hold).
 * IFL_EINVAL when ex does not speculate with a draft model. Reads the
 * engine's state: call it only while the engine is idle (after
 * ifl_executor_wait_idle; the idle release of the pool's memory, which
 * goes on then, is locked against it), or on the engine thread. */
int ifl_spec_draft_stats(struct ifl_executor *ex, struct ifl_kvc_stats *out);

#endif
