// consumer.c compiled as C++ (the header's extern "C" and a C++ engine's link line).
#include "consumer.c"
