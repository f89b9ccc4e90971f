// Environment capture for reports and repro exports.
#include "environment.h"

#include <unistd.h>

#include <fstream>
#include <thread>

#include "attnscope/device.h"
#include "attnscope/registry.h"

#ifndef ATTNSCOPE_VERSION
#define ATTNSCOPE_VERSION "0.0.0"
#endif

namespace attnscope {

std::vector<DeviceInfo> list_devices(std::string* why) {
  std::vector<DeviceInfo> out;
  for (const auto& d : query_devices(why)) {
    DeviceInfo i;
    i.index = d.index;
    i.name = d.name;
    i.sm_count = d.sm_count;
    i.cc_major = d.cc_major;
    i.cc_minor = d.cc_minor;
    i.memory_gib = d.memory_bytes / (1024.0 * 1024.0 * 1024.0);
    out.push_back(i);
  }
  return out;
}

void list_libraries(Environment* e) {
  for (const auto& f : backend_families()) {
    if (!f.compiled || f.pin.empty()) continue;  // attnscope's own code, or a family not built
    e->libraries.emplace_back(f.name, f.note);
    if (!f.mismatch.empty()) e->library_mismatches.push_back(f.name + ": " + f.mismatch);
  }
}

const char* attnscope_version() { return ATTNSCOPE_VERSION; }

Environment capture_environment() {
  Environment e;
  e.version = attnscope_version();
#if defined(__clang__)
  e.build = "clang " __clang_version__;
#elif defined(__GNUC__)
  e.build = "g++ " __VERSION__;
#endif
#ifdef NDEBUG
  e.build += ", release";
#else
  e.build += ", debug";
#endif
  e.cuda_compiled = cuda_compiled();
  e.build += e.cuda_compiled ? ", CUDA backends compiled" : ", no CUDA";
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) == 0) e.host = host;
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      e.cpu = line.substr(line.find(':') + 2);
      break;
    }
  }
  e.cpu_threads = static_cast<int>(std::thread::hardware_concurrency());
  e.devices = list_devices(&e.device_error);
  list_libraries(&e);
  return e;
}

nlohmann::ordered_json environment_to_json(const Environment& e) {
  nlohmann::ordered_json j;
  j["attnscope"] = e.version;
  j["build"] = e.build;
  j["host"] = e.host;
  j["cpu"] = e.cpu;
  j["cpu_threads"] = e.cpu_threads;
  j["cuda_compiled"] = e.cuda_compiled;
  nlohmann::ordered_json devs = nlohmann::ordered_json::array();
  for (const auto& d : e.devices)
    devs.push_back({{"index", d.index},
                    {"name", d.name},
                    {"sm_count", d.sm_count},
                    {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                    {"memory_gib", d.memory_gib}});
  j["devices"] = devs;
  if (!e.device_error.empty()) j["device_note"] = e.device_error;
  if (!e.libraries.empty()) {
    nlohmann::ordered_json libs = nlohmann::ordered_json::object();
    for (const auto& [name, note] : e.libraries) libs[name] = note;
    j["libraries"] = libs;
  }
  if (!e.library_mismatches.empty()) j["library_mismatch"] = e.library_mismatches;
  return j;
}

}  // namespace attnscope
