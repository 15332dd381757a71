// Test driver for camera_convert.h: each line of the cases file is FRAME<TAB>OUT<TAB>CONFIG; the
// frame is converted with that config and the raw output written to OUT.
#include "camera_convert.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) { std::fprintf(stderr, "usage: camera_driver CASES\n"); return 2; }
  std::ifstream cases(argv[1]);
  std::string line;
  try {
    while (std::getline(cases, line)) {
      size_t a = line.find('\t'), b = line.find('\t', a + 1);
      std::ifstream in(line.substr(0, a), std::ios::binary);
      std::vector<uint8_t> frame((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      mobilize::camera::FrameConverter conv(mobilize::camera::parse_frame_config(line.substr(b + 1)));
      std::vector<uint8_t> out(conv.output_nbytes());
      conv.convert(frame.data(), frame.size(), out.data());
      std::ofstream(line.substr(a + 1, b - a - 1), std::ios::binary).write(reinterpret_cast<char*>(out.data()),
                                                                             static_cast<std::streamsize>(out.size()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
