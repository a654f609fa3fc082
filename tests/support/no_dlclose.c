/* no_dlclose.c - a test-only preload that turns dlclose() into a no-op.
 *
 * Open MPI loads its components (mca_*.so) with dlopen and unloads them in MPI_Finalize. Leaks
 * that Open MPI leaves inside those components then show up in LeakSanitizer reports as
 * "<unknown module>", which no suppression can name. Keeping the components mapped lets the
 * suppressions in tests/lsan.supp match them by module name, so the sanitizer build still reports
 * every leak of our own code in the MPI tests. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}
