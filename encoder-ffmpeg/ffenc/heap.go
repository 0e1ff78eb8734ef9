package ffenc

/*
#include <malloc.h>

static void tc_limit_arenas(void) { mallopt(M_ARENA_MAX, 2); }
static void tc_trim(void) { malloc_trim(0); }
*/
import "C"

// Go runs cgo calls on whichever OS thread is free, and glibc gives each
// thread that allocates its own malloc arena (up to 8 per core); freed codec
// and frame buffers then stay cached in many arenas and the plugin's resident
// set drifts upward over encoder reopens although nothing leaks. Two arenas
// keep it flat at no measurable cost (the encoder runs one call at a time).
func init() { C.tc_limit_arenas() }

// trimHeap returns the C heap's free memory to the OS, so that a resident
// set measurement shows what is really held.
func trimHeap() { C.tc_trim() }
