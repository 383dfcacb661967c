/* placeholder */
#include "kernels/impl.h"

void ifl_kernels_fill_avx512(struct ifl_kernels *k) { k->name = "avx512"; }
