/* Replays the checked-in corpus of the mmproj loader's fuzzer
 * (tests/fuzz/corpus/fuzz_clip/: small mkmodel --mmproj files of each
 * weight type and variant, and inputs the fuzzer kept) through
 * tests/fuzz/fuzz_clip.c's entry point, built without libFuzzer: a loader
 * that crashes, hands out a model that breaks its promises, or fails
 * without a sentence aborts here. */
#include "fuzz/replay.h"

static void test_corpus(void)
{
    replay_corpus("tests/fuzz/corpus/fuzz_clip", 8);
}

int main(void)
{
    T_RUN(test_corpus);
    return t_done();
}
