/* Preloaded into the sanitizer job's test programs (scripts/test-sanitizers.sh):
 * dlclose does nothing, so plugins that Open MPI (and PMIx, hwloc) load in
 * MPI_Init stay mapped until the program exits. LeakSanitizer checks at exit;
 * with the plugins unloaded, their allocations show as "<unknown module>" and
 * cannot be matched to the Open MPI suppressions in lsan.supp. */
int dlclose(void* handle) {
  (void)handle;
  return 0;
}
