// Configure-time probe (cudnn_find.cmake): prints cudnnGetVersion() of the library file given as
// argv[1], loaded by that path, so the version checked is the file's and not the loader's choice.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) return 3;
  using GetVersion = size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"));
  if (!get) return 4;
  std::printf("%zu\n", get());
  return 0;
}
