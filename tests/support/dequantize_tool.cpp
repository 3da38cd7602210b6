// recur's own dequantization of one tensor of a quantized model directory, as raw float32 (the
// numbers the loader gives a tied embedding and the kernels multiply by), for the Python
// reader's test: dequantize_tool DIR NAME OUT.
#include <cstdio>
#include <fstream>
#include <vector>

#include "kernels/quant.h"
#include "recur/safetensors.h"

int main(int argc, char** argv) {
  using namespace recur;
  if (argc != 4) {
    std::fprintf(stderr, "usage: dequantize_tool DIR NAME OUT\n");
    return 2;
  }
  try {
    const auto store = TensorStore::open_dir(argv[1]);
    const std::string name = argv[2];
    const TensorInfo& info = store.info(name);
    kernels::QuantizedRows q;
    q.type = info.dtype == DType::kI8 ? kernels::QuantType::kQ8 : kernels::QuantType::kQ4;
    q.n_out = int(info.shape.at(0));
    q.k_in = int(info.shape.at(1)) * (q.type == kernels::QuantType::kQ8 ? 1 : 2);
    q.codes = store.read_bytes(name);
    const auto raw = store.read_bytes(name + "_scale");
    q.scales.resize(raw.size() / 2);
    for (std::size_t i = 0; i < q.scales.size(); ++i)
      q.scales[i] = static_cast<std::uint16_t>(raw[2 * i] | (raw[2 * i + 1] << 8));
    kernels::check_quantized(q, name.c_str());
    std::vector<float> w(std::size_t(q.n_out) * std::size_t(q.k_in));
    kernels::dequantize_rows(q, w.data());
    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<const char*>(w.data()), std::streamsize(w.size() * sizeof(float)));
    return out ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dequantize_tool: %s\n", e.what());
    return 1;
  }
}
