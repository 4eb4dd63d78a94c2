// LeakSanitizer and SystemC's pooled allocator: sc_event_timed objects come from 1 KiB blocks
// that libsystemc never frees, and a kernel context deleted with timed events still pending
// (every Simulation ends so: its models keep timers armed) drops the last pointer into such a
// block. That is the library's design, not a leak of ours; everything else stays checked.
// LSan reads this hook at exit in sanitizer builds; elsewhere nothing calls it.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:sc_core::sc_event_timed::allocate\n";
}
