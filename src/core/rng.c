/* Normal draws for the generator in rng.h. */
#include "core/rng.h"

#include <math.h>

float ifl_rng_normal(struct ifl_rng *r)
{
    double u1 = ((double)(ifl_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(ifl_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
