#include "testing.h"
#include "kvbound.h"
TEST(version) { CHECK(strlen(KVB_VERSION_STRING) > 0); }
int main(void) { RUN(version); return test_summary(); }
