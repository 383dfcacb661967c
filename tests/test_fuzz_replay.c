/* Replays the checked-in corpus of the differential guide fuzzer
 * (tests/fuzz/corpus/fuzz_guide_diff/) through its entry point, built by
 * the ordinary compiler without libFuzzer (tests/fuzz/replay.h), so CI
 * re-checks every input the fuzzer kept: a regex whose automaton disagrees
 * with PCRE2, or a schema whose grammar takes a document the validator
 * rejects, aborts with the constraint and the sample. */
#include "fuzz/replay.h"

static void test_corpus(void)
{
    replay_corpus("tests/fuzz/corpus/fuzz_guide_diff", 50);
}

int main(void)
{
    T_RUN(test_corpus);
    return t_done();
}
