/* placeholder until the CLI lands */
#include <stdio.h>
#include "inflight.h"
int main(void) { printf("inflight %s\n", ifl_version()); return 0; }
