/* Replays the checked-in corpus of the image decoder's fuzzer
 * (tests/fuzz/corpus/fuzz_image/: PNG files of every colour type, bit depth
 * and interlacing, baseline and progressive JPEG, and broken ones) through
 * tests/fuzz/fuzz_image.c's entry point, built without libFuzzer: a
 * decoder that crashes, hands out an image over the limits, or fails
 * without a sentence aborts here. */
#include "fuzz/replay.h"

static void test_corpus(void)
{
    replay_corpus("tests/fuzz/corpus/fuzz_image", 20);
}

int main(void)
{
    T_RUN(test_corpus);
    return t_done();
}
