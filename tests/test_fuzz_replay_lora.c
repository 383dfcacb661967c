/* Replays the checked-in corpus of the LoRA adapter loader's fuzzer
 * (tests/fuzz/corpus/fuzz_lora/: adapters of every type and target made by
 * mkmodel for the target's tiny base, and inputs the fuzzer kept) through
 * tests/fuzz/fuzz_lora.c's entry point, built without libFuzzer: a loader
 * that crashes, accepts a file it should not hand out, or fails without a
 * sentence aborts here. */
#include "fuzz/replay.h"

static void test_corpus(void)
{
    replay_corpus("tests/fuzz/corpus/fuzz_lora", 20);
}

int main(void)
{
    T_RUN(test_corpus);
    return t_done();
}
