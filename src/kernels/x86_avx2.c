/* placeholder */
#include "kernels/impl.h"

void ifl_kernels_fill_avx2(struct ifl_kernels *k) { k->name = "avx2"; }
