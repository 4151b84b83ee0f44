// PNG and JPEG through libpng's and libjpeg's classic APIs, each with a setjmp error handler kept
// inside one C-style function that owns only plain memory, so that no C++ object is skipped by
// its longjmp.
#include "engine/data/image_decode.h"

#include <png.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
// jerror.h after jpeglib.h: the warning codes.
#include <jerror.h>

#include "engine/core/error.h"

namespace tb::data {
namespace {

bool is_png(std::span<const std::uint8_t> b) {
  static const std::uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}

bool is_jpeg(std::span<const std::uint8_t> b) {
  return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
}

std::string first_bytes(std::span<const std::uint8_t> b) {
  std::string out;
  char hex[4];
  for (std::size_t i = 0; i < b.size() && i < 8; ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", b[i]);
    out += (i ? " " : "") + std::string(hex);
  }
  return out.empty() ? "nothing (an empty file)" : out;
}

// Sizes from a header, checked before any pixel memory is taken: within kMaxImagePixels, and no
// more pixels than a file of `bytes` bytes can hold (deflate and JPEG's entropy coding expand at
// most about 1032:1), so that a short file claiming a huge image is refused, not allocated.
void check_size(std::int64_t w, std::int64_t h, std::size_t bytes, const std::string& name) {
  TB_CHECK(w > 0 && h > 0, "[image] ", name, ": ", w, "x", h, " pixels is not an image");
  TB_CHECK(w <= kMaxImagePixels / h, "[image] ", name, ": ", w, "x", h,
           " pixels is larger than the limit of ", kMaxImagePixels, " pixels");
  const std::int64_t most = (std::int64_t{16} << 20) + 1100 * static_cast<std::int64_t>(bytes);
  TB_CHECK(w * h <= most, "[image] ", name, ": its header says ", w, "x", h, " pixels, more than ",
           bytes, " bytes can hold (truncated or corrupt)");
}

// RGB(A) samples to what the caller asked for, as torchvision's PIL loader and PIL's convert do:
// colour keeps R, G, B and drops alpha (Image.convert("RGB") keeps a transparent pixel's stored
// colour, it does not composite), grey is ITU-R 601-2 luma on the stored values, in PIL's fixed
// point (Pillow src/libImaging/Convert.c, L24): (19595 R + 38470 G + 7471 B + 0x8000) >> 16.
std::vector<std::uint8_t> to_channels(const std::uint8_t* in, std::size_t pixels, int in_channels,
                                      std::int64_t channels) {
  std::vector<std::uint8_t> out(pixels * static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < pixels; ++i) {
    const std::uint8_t* p = in + i * static_cast<std::size_t>(in_channels);
    if (channels == 3) {
      out[3 * i] = p[0];
      out[3 * i + 1] = p[1];
      out[3 * i + 2] = p[2];
    } else {
      out[i] =
          static_cast<std::uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
    }
  }
  return out;
}

// A decoder's malloc'd RGB rows (freed here) as `channels` channels.
DecodedImage from_rgb(unsigned char* rgb, unsigned width, unsigned height, std::int64_t channels) {
  DecodedImage out;
  out.width = width;
  out.height = height;
  out.channels = channels;
  try {
    out.pixels = to_channels(rgb, static_cast<std::size_t>(out.width * out.height), 3, channels);
  } catch (...) {
    std::free(rgb);
    throw;
  }
  std::free(rgb);
  return out;
}

// What the setjmp function reports: plain data only.
struct PngResult {
  int ok = 0;
  int size_error = 0;
  unsigned width = 0, height = 0;
  unsigned char* pixels = nullptr;  // malloc'd, height × width × 3
  char message[256] = {};
};

struct PngSource {
  const unsigned char* data;
  std::size_t size;
  std::size_t at;
};

extern "C" void png_read_memory(png_structp png, png_bytep out, std::size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->at) png_error(png, "read beyond end of data");
  std::memcpy(out, src->data + src->at, n);
  src->at += n;
}

extern "C" void png_error_exit(png_structp png, png_const_charp message) {
  auto* result = static_cast<PngResult*>(png_get_error_ptr(png));
  std::snprintf(result->message, sizeof(result->message), "%s", message);
  png_longjmp(png, 1);
}

// Warnings (a bad CRC in an ancillary chunk, an unknown chunk) are kept quiet, as PIL keeps them.
extern "C" void png_warning_quiet(png_structp, png_const_charp) {}

// The whole decode between setjmp and the last libpng call: no C++ object lives here. libpng's
// classic API, not its simplified one: that one converts to sRGB from the file's gAMA (and takes
// a 16-bit file without colour information for linear light, raising 0x8080 to 186), where PIL
// and so torchvision's loader ignore the gamma and keep the stored values.
void decode_png_raw(const unsigned char* data, std::size_t size, PngResult* result) {
  PngSource src{data, size, 0};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, result, png_error_exit, png_warning_quiet);
  if (png == nullptr) {
    std::snprintf(result->message, sizeof(result->message), "out of memory");
    return;
  }
  png_infop info = png_create_info_struct(png);
  unsigned char* volatile pixels = nullptr;
  png_bytep* volatile rows = nullptr;
  if (info == nullptr) {
    std::snprintf(result->message, sizeof(result->message), "out of memory");
    png_destroy_read_struct(&png, nullptr, nullptr);
    return;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    std::free(pixels);
    std::free(rows);
    return;
  }
  png_set_read_fn(png, &src, png_read_memory);
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // sizes are checked below, as for JPEG
  png_read_info(png, info);
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0;
  png_get_IHDR(png, info, &w, &h, &depth, &color, nullptr, nullptr, nullptr);
  result->width = w;
  result->height = h;
  const auto wi = static_cast<std::int64_t>(w);
  const auto hi = static_cast<std::int64_t>(h);
  if (wi == 0 || hi == 0 || wi > kMaxImagePixels / hi ||
      wi * hi > (std::int64_t{16} << 20) + 1100 * static_cast<std::int64_t>(size)) {
    result->size_error = 1;
    png_destroy_read_struct(&png, &info, nullptr);
    return;
  }
  // 8-bit RGB as PIL's convert("RGB") makes it: 16-bit samples by their high byte (PIL's
  // "RGB;16B" unpacking), palettes and 1/2/4-bit grey expanded, grey copied to R, G and B, alpha
  // dropped without compositing (a transparent pixel keeps its stored colour); gAMA, cHRM, sRGB
  // and iCCP are not applied.
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  if ((color & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t row = png_get_rowbytes(png, info);
  if (row != static_cast<std::size_t>(w) * 3) png_error(png, "unexpected row size after expansion");
  pixels = static_cast<unsigned char*>(std::malloc(row * h));
  rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * h));
  if (pixels == nullptr || rows == nullptr) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < h; ++y)
    rows[y] = pixels + row * y;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  std::free(rows);
  result->pixels = pixels;
  result->ok = 1;
}

DecodedImage decode_png(std::span<const std::uint8_t> bytes, std::int64_t channels,
                        const std::string& name) {
  PngResult r;
  decode_png_raw(bytes.data(), bytes.size(), &r);
  if (r.size_error) check_size(r.width, r.height, bytes.size(), name);  // throws with the sizes
  TB_CHECK(r.ok, "[image] ", name, ": truncated or corrupt PNG (libpng: ", r.message, ")");
  return from_rgb(r.pixels, r.width, r.height, channels);
}

// libjpeg's error manager, extended with the place to jump back to.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (extraneous bytes, a corrupt marker) are kept quiet, as PIL keeps them; a file that ends
// before its last scanline is an error, as in PIL ("image file is truncated"): libjpeg would
// otherwise fill the rest with grey and report success.
extern "C" void jpeg_warning(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_error_exit(cinfo);
}

// What the setjmp function reports: plain data only.
struct JpegResult {
  int ok = 0;
  int size_error = 0;
  unsigned width = 0, height = 0;
  unsigned char* pixels = nullptr;  // malloc'd, height × width × channels
  char message[JMSG_LENGTH_MAX] = {};
};

// The whole decode between setjmp and the last libjpeg call: no C++ object lives here.
void decode_jpeg_raw(const unsigned char* data, unsigned long size, JpegResult* result) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_warning;
  unsigned char* volatile pixels = nullptr;
  if (setjmp(err.jump)) {
    std::memcpy(result->message, err.message, sizeof(err.message));
    jpeg_destroy_decompress(&cinfo);
    std::free(pixels);
    return;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  result->width = cinfo.image_width;
  result->height = cinfo.image_height;
  const auto w = static_cast<std::int64_t>(cinfo.image_width);
  const auto h = static_cast<std::int64_t>(cinfo.image_height);
  if (w == 0 || h == 0 || w > kMaxImagePixels / h ||
      w * h > (std::int64_t{16} << 20) + 1100 * static_cast<std::int64_t>(size)) {
    result->size_error = 1;
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  // Always RGB, grey from it as PIL's convert("L") computes it (a grey JPEG gives its values back).
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  const std::size_t row = static_cast<std::size_t>(cinfo.output_width) *
                          static_cast<std::size_t>(cinfo.output_components);
  pixels = static_cast<unsigned char*>(std::malloc(row * cinfo.output_height));
  if (pixels == nullptr) {
    std::snprintf(result->message, sizeof(result->message), "out of memory");
    jpeg_destroy_decompress(&cinfo);
    return;
  }
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW line = pixels + row * cinfo.output_scanline;
    jpeg_read_scanlines(&cinfo, &line, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  result->pixels = pixels;
  result->ok = 1;
}

DecodedImage decode_jpeg(std::span<const std::uint8_t> bytes, std::int64_t channels,
                         const std::string& name) {
  JpegResult r;
  decode_jpeg_raw(bytes.data(), static_cast<unsigned long>(bytes.size()), &r);
  if (r.size_error) check_size(r.width, r.height, bytes.size(), name);  // throws with the sizes
  TB_CHECK(r.ok, "[image] ", name, ": truncated or corrupt JPEG (libjpeg: ", r.message, ")");
  return from_rgb(r.pixels, r.width, r.height, channels);
}

// PIL's bilinear filter (Pillow src/libImaging/Resample.c): for each output index, the weights of
// the input samples within `support` (1, widened by the scale when shrinking) of its centre.
struct AxisWeights {
  std::vector<std::int64_t> first;  // first input index per output index
  std::vector<std::int64_t> count;  // inputs per output index
  std::vector<double> w;            // count weights per output index, at o * stride
  std::int64_t stride = 0;
};

AxisWeights axis_weights(std::int64_t in, std::int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double fscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * fscale;
  AxisWeights a;
  a.stride = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  a.first.resize(static_cast<std::size_t>(out));
  a.count.resize(static_cast<std::size_t>(out));
  a.w.assign(static_cast<std::size_t>(out * a.stride), 0.0);
  for (std::int64_t o = 0; o < out; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    auto lo = static_cast<std::int64_t>(center - support + 0.5);
    auto hi = static_cast<std::int64_t>(center + support + 0.5);
    lo = std::max<std::int64_t>(lo, 0);
    hi = std::min<std::int64_t>(hi, in);
    double total = 0;
    double* w = a.w.data() + o * a.stride;
    for (std::int64_t i = lo; i < hi; ++i) {
      const double x = (static_cast<double>(i) - center + 0.5) / fscale;
      const double t = std::abs(x) < 1.0 ? 1.0 - std::abs(x) : 0.0;
      w[i - lo] = t;
      total += t;
    }
    for (std::int64_t i = 0; i < hi - lo && total > 0; ++i)
      w[i] /= total;
    a.first[static_cast<std::size_t>(o)] = lo;
    a.count[static_cast<std::size_t>(o)] = hi - lo;
  }
  return a;
}

std::uint8_t clip8(double v) {
  const double r = std::floor(v + 0.5);
  return static_cast<std::uint8_t>(r < 0 ? 0 : r > 255 ? 255 : r);
}

}  // namespace

DecodedImage decode_image(std::span<const std::uint8_t> bytes, std::int64_t channels,
                          const std::string& name) {
  TB_CHECK(channels == 1 || channels == 3, "[image] ", name, ": channels must be 1 or 3, got ",
           channels);
  if (is_png(bytes)) return decode_png(bytes, channels, name);
  if (is_jpeg(bytes)) return decode_jpeg(bytes, channels, name);
  throw ValueError("[image] " + name + ": not a PNG or JPEG file (it starts with " +
                   first_bytes(bytes) + ")");
}

DecodedImage decode_image_file(const std::filesystem::path& file, std::int64_t channels) {
  std::ifstream in(file, std::ios::binary | std::ios::ate);
  TB_CHECK(static_cast<bool>(in), "[image] ", file.string(), ": cannot be read");
  const std::streamoff size = in.tellg();
  TB_CHECK(size >= 0 && size <= (std::streamoff{1} << 31), "[image] ", file.string(), ": ", size,
           " bytes is not an image file size this reader takes");
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  TB_CHECK(static_cast<bool>(in), "[image] ", file.string(), ": read failed");
  return decode_image(bytes, channels, file.string());
}

std::vector<std::uint8_t> resize_to_planes(const DecodedImage& image, std::int64_t height,
                                           std::int64_t width) {
  TB_CHECK(height > 0 && width > 0, "[image] resize to ", height, "x", width,
           ": sizes must be > 0");
  const std::int64_t c = image.channels;
  const std::int64_t iw = image.width, ih = image.height;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(c * height * width));
  if (iw == width && ih == height) {  // only the layout changes
    for (std::int64_t y = 0; y < ih; ++y)
      for (std::int64_t x = 0; x < iw; ++x)
        for (std::int64_t k = 0; k < c; ++k)
          out[static_cast<std::size_t>((k * height + y) * width + x)] =
              image.pixels[static_cast<std::size_t>((y * iw + x) * c + k)];
    return out;
  }
  // Horizontal pass to 8-bit (as PIL does between its passes), then vertical.
  const AxisWeights hx = axis_weights(iw, width);
  const AxisWeights vy = axis_weights(ih, height);
  std::vector<std::uint8_t> mid(static_cast<std::size_t>(ih * width * c));
  for (std::int64_t y = 0; y < ih; ++y)
    for (std::int64_t x = 0; x < width; ++x) {
      const auto xs = static_cast<std::size_t>(x);
      const double* w = hx.w.data() + x * hx.stride;
      for (std::int64_t k = 0; k < c; ++k) {
        double s = 0;
        for (std::int64_t i = 0; i < hx.count[xs]; ++i)
          s += w[i] * image.pixels[static_cast<std::size_t>((y * iw + hx.first[xs] + i) * c + k)];
        mid[static_cast<std::size_t>((y * width + x) * c + k)] = clip8(s);
      }
    }
  for (std::int64_t y = 0; y < height; ++y) {
    const auto ys = static_cast<std::size_t>(y);
    const double* w = vy.w.data() + y * vy.stride;
    for (std::int64_t x = 0; x < width; ++x)
      for (std::int64_t k = 0; k < c; ++k) {
        double s = 0;
        for (std::int64_t i = 0; i < vy.count[ys]; ++i)
          s += w[i] * mid[static_cast<std::size_t>(((vy.first[ys] + i) * width + x) * c + k)];
        out[static_cast<std::size_t>((k * height + y) * width + x)] = clip8(s);
      }
  }
  return out;
}

}  // namespace tb::data
