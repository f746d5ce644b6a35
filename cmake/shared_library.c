/* libturbospark.so: every object of the core (and CUDA) static libraries, linked whole (see
 * CMakeLists.txt); only the functions of include/turbospark.h are exported (turbospark.map, made
 * from the header). CMake wants one source of the library's own: this one. */
typedef int ts_shared_library_unit;
