// Image folders: PNG and JPEG decoding (written here with libpng and libjpeg, read back by
// engine/data/image_decode), PIL's antialiased resize on hand-computed values, the folder layout
// (classes, splits, normalisation), and errors that name the file: not an image, truncated, a
// header claiming a huge image, a class without images.
#include <gtest/gtest.h>
#include <png.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/data/image_decode.h"
#include "engine/data/image_folder.h"
#include "engine/data/registry.h"
#include "engine/train/run_config.h"
#include "engine/train/trainer.h"
#include "tests/engine/test_util.h"

namespace fs = std::filesystem;
using namespace tb::data;

namespace {

// An RGB test image: pixel (x, y) = (10x + seed, 20y + seed, 7(x + y) + seed).
std::vector<std::uint8_t> pattern(int w, int h, int seed) {
  std::vector<std::uint8_t> px(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      auto* p = &px[static_cast<std::size_t>((y * w + x) * 3)];
      p[0] = static_cast<std::uint8_t>(10 * x + seed);
      p[1] = static_cast<std::uint8_t>(20 * y + seed);
      p[2] = static_cast<std::uint8_t>(7 * (x + y) + seed);
    }
  return px;
}

void write_png(const fs::path& file, int w, int h, const std::vector<std::uint8_t>& rgb) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(w);
  img.height = static_cast<png_uint_32>(h);
  img.format = PNG_FORMAT_RGB;
  ASSERT_TRUE(png_image_write_to_file(&img, file.c_str(), 0, rgb.data(), 0, nullptr))
      << img.message;
}

void write_jpeg(const fs::path& file, int w, int h, const std::vector<std::uint8_t>& rgb) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  FILE* f = std::fopen(file.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  jpeg_stdio_dest(&c, f);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  for (int k = 0; k < 3; ++k)  // no chroma subsampling (4:4:4)
    c.comp_info[k].h_samp_factor = c.comp_info[k].v_samp_factor = 1;
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    auto* row = const_cast<JSAMPLE*>(&rgb[static_cast<std::size_t>(c.next_scanline * w * 3)]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::fclose(f);
}

std::vector<std::uint8_t> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tb::Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

}  // namespace

TEST(ImageDecode, PngRoundTripsAndJpegIsClose) {
  const tb::test::TempDir dir("tb_image_decode");
  const auto rgb = pattern(6, 4, 3);
  write_png(dir.path() / "a.png", 6, 4, rgb);
  write_jpeg(dir.path() / "a.jpg", 6, 4, rgb);
  const DecodedImage png = decode_image_file(dir.path() / "a.png", 3);
  EXPECT_EQ(png.width, 6);
  EXPECT_EQ(png.height, 4);
  EXPECT_EQ(png.pixels, rgb);
  const DecodedImage jpg = decode_image_file(dir.path() / "a.jpg", 3);
  ASSERT_EQ(jpg.pixels.size(), rgb.size());
  for (std::size_t i = 0; i < rgb.size(); ++i)
    EXPECT_NEAR(jpg.pixels[i], rgb[i], 3) << i;  // quality 100, 4:4:4
  // Grey: a grey pixel stays itself.
  std::vector<std::uint8_t> greys(6 * 4 * 3, 77);
  write_png(dir.path() / "g.png", 6, 4, greys);
  const DecodedImage g = decode_image_file(dir.path() / "g.png", 1);
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, std::vector<std::uint8_t>(24, 77));
}

// Grey and colour as torchvision's PIL loader makes them. The grey values are Pillow 9.4's
// Image.convert("L") of these four pixels (ITU-R 601-2 luma on the stored values; libpng's own
// conversion mixes in linear light and gave other values). RGBA drops its alpha as
// convert("RGB") does: a transparent pixel keeps its colour (libpng's compositing made it black).
TEST(ImageDecode, GreyAndAlphaAreConvertedAsPilConvertsThem) {
  const tb::test::TempDir dir("tb_image_convert");
  const std::vector<std::uint8_t> rgb = {10, 200, 30, 255, 0, 0, 0, 0, 255, 123, 45, 67};
  write_png(dir.path() / "c.png", 4, 1, rgb);
  EXPECT_EQ(decode_image_file(dir.path() / "c.png", 1).pixels,
            (std::vector<std::uint8_t>{124, 76, 29, 71}));
  // The same pixels through JPEG: grey is the same luma of the decoded colour.
  const auto big = pattern(16, 16, 5);
  write_jpeg(dir.path() / "p.jpg", 16, 16, big);
  const DecodedImage colour = decode_image_file(dir.path() / "p.jpg", 3);
  const DecodedImage grey = decode_image_file(dir.path() / "p.jpg", 1);
  ASSERT_EQ(grey.pixels.size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) {
    const std::uint8_t* p = &colour.pixels[3 * i];
    EXPECT_EQ(grey.pixels[i], (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16) << i;
  }
  // RGBA: opaque, half and fully transparent pixels all keep their colour.
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = 3;
  img.height = 1;
  img.format = PNG_FORMAT_RGBA;
  const std::vector<std::uint8_t> rgba = {200, 100, 50, 255, 200, 100, 50, 128, 200, 100, 50, 0};
  ASSERT_TRUE(
      png_image_write_to_file(&img, (dir.path() / "a.png").c_str(), 0, rgba.data(), 0, nullptr));
  EXPECT_EQ(decode_image_file(dir.path() / "a.png", 3).pixels,
            (std::vector<std::uint8_t>{200, 100, 50, 200, 100, 50, 200, 100, 50}));
  EXPECT_EQ(decode_image_file(dir.path() / "a.png", 1).pixels,
            (std::vector<std::uint8_t>{124, 124, 124}));
}

// A PNG written chunk by chunk: IHDR of w x h at `depth` bits and colour type `color`, the
// `extra` chunks (type, data) after it, the rows (each with its filter byte 0) in one IDAT.
std::vector<std::uint8_t> raw_png(int w, int h, int depth, int color,
                                  const std::vector<std::uint8_t>& rows,
                                  const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto be32 = [](std::string& s, std::uint32_t v) {
    for (int i = 3; i >= 0; --i)
      s += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    std::string c;
    be32(c, static_cast<std::uint32_t>(data.size()));
    const std::string body = type + data;
    c += body;
    be32(c, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                             static_cast<uInt>(body.size()))));
    out.insert(out.end(), c.begin(), c.end());
  };
  std::string ihdr;
  be32(ihdr, static_cast<std::uint32_t>(w));
  be32(ihdr, static_cast<std::uint32_t>(h));
  ihdr += {static_cast<char>(depth), static_cast<char>(color), 0, 0, 0};
  chunk("IHDR", ihdr);
  for (const auto& [type, data] : extra)
    chunk(type, data);
  uLongf n = compressBound(static_cast<uLong>(rows.size()));
  std::string z(n, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &n, rows.data(), static_cast<uLong>(rows.size()));
  z.resize(n);
  chunk("IDAT", z);
  chunk("IEND", "");
  return out;
}

// 16-bit samples become their high byte and a gAMA chunk is not applied, as PIL (and so
// torchvision's loader) reads them. libpng's simplified API took a 16-bit file without colour
// information for linear light and sRGB-encoded it (0x8080 read as 186, not 128), and applied a
// gAMA of 1.0 to 8-bit files too (10, 128, 250 read as 59, 186, 253).
TEST(ImageDecode, SixteenBitAndGammaPngsKeepTheirStoredValues) {
  const std::vector<std::uint8_t> rgb16 = {0, 0x0A, 0x0A, 0x80, 0x80, 0xFA, 0xFA};
  EXPECT_EQ(decode_image(raw_png(1, 1, 16, 2, rgb16, {}), 3, "rgb16").pixels,
            (std::vector<std::uint8_t>{10, 128, 250}));
  const std::vector<std::uint8_t> grey16 = {0, 0x80, 0x80};
  EXPECT_EQ(decode_image(raw_png(1, 1, 16, 0, grey16, {}), 1, "grey16").pixels,
            (std::vector<std::uint8_t>{128}));
  EXPECT_EQ(decode_image(raw_png(1, 1, 16, 0, grey16, {}), 3, "grey16").pixels,
            (std::vector<std::uint8_t>{128, 128, 128}));
  const std::string gamma_one = {0, 0x01, static_cast<char>(0x86), static_cast<char>(0xA0)};
  const std::vector<std::uint8_t> rgb8 = {0, 10, 128, 250};
  EXPECT_EQ(decode_image(raw_png(1, 1, 8, 2, rgb8, {{"gAMA", gamma_one}}), 3, "gamma").pixels,
            (std::vector<std::uint8_t>{10, 128, 250}));
  // 16-bit RGBA keeps the colour's high bytes; 1-bit grey expands to 0 and 255.
  const std::vector<std::uint8_t> rgba16 = {0, 0x0A, 0x0A, 0x80, 0x80, 0xFA, 0xFA, 0, 0};
  EXPECT_EQ(decode_image(raw_png(1, 1, 16, 6, rgba16, {}), 3, "rgba16").pixels,
            (std::vector<std::uint8_t>{10, 128, 250}));
  const std::vector<std::uint8_t> bits = {0, 0x80};
  EXPECT_EQ(decode_image(raw_png(2, 1, 1, 0, bits, {}), 1, "bits").pixels,
            (std::vector<std::uint8_t>{255, 0}));
}

TEST(ImageDecode, BadFilesAreNamedWithWhatIsWrong) {
  const tb::test::TempDir dir("tb_image_bad");
  const auto rgb = pattern(8, 8, 1);
  write_png(dir.path() / "ok.png", 8, 8, rgb);
  write_jpeg(dir.path() / "ok.jpg", 8, 8, rgb);
  auto png = read_all(dir.path() / "ok.png");
  auto jpg = read_all(dir.path() / "ok.jpg");
  const std::vector<std::uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_CONTAINS(error_of([&] { decode_image(gif, 3, "x.gif"); }),
                  "[image] x.gif: not a PNG or JPEG file (it starts with 47 49 46 38 39 61)");
  EXPECT_CONTAINS(error_of([&] { decode_image({}, 3, "e.png"); }), "an empty file");
  const std::vector<std::uint8_t> png_cut(png.begin(),
                                          png.begin() + static_cast<long>(png.size() / 2));
  EXPECT_CONTAINS(error_of([&] { decode_image(png_cut, 3, "cut.png"); }),
                  "[image] cut.png: truncated or corrupt PNG (libpng: ");
  const std::vector<std::uint8_t> jpg_cut(jpg.begin(), jpg.begin() + 40);
  EXPECT_CONTAINS(error_of([&] { decode_image(jpg_cut, 3, "cut.jpg"); }), "[image] cut.jpg: ");
  EXPECT_CONTAINS(error_of([&] { decode_image(jpg_cut, 3, "cut.jpg"); }), "JPEG");
  // A JPEG whose scan ends early: libjpeg only warns and fills the rest with grey; it is refused.
  const auto big = pattern(32, 32, 2);
  write_jpeg(dir.path() / "big.jpg", 32, 32, big);
  const auto whole = read_all(dir.path() / "big.jpg");
  ASSERT_NO_THROW(decode_image(whole, 3, "big.jpg"));
  const std::vector<std::uint8_t> scan_cut(whole.begin(),
                                           whole.begin() + static_cast<long>(whole.size() * 3 / 4));
  EXPECT_CONTAINS(
      error_of([&] { decode_image(scan_cut, 3, "short.jpg"); }),
      "[image] short.jpg: truncated or corrupt JPEG (libjpeg: Premature end of JPEG file)");
  // A header claiming 100000 x 100000 pixels (CRC fixed up): refused before any allocation.
  auto huge = png;
  const std::uint32_t side = 100000;
  for (int k = 0; k < 2; ++k)
    for (int b = 0; b < 4; ++b)
      huge[static_cast<std::size_t>(16 + 4 * k + b)] =
          static_cast<std::uint8_t>(side >> (24 - 8 * b));
  const auto crc = crc32(0, huge.data() + 12, 17);  // "IHDR" and its 13 bytes
  for (int b = 0; b < 4; ++b)
    huge[static_cast<std::size_t>(29 + b)] = static_cast<std::uint8_t>(crc >> (24 - 8 * b));
  EXPECT_CONTAINS(error_of([&] { decode_image(huge, 3, "huge.png"); }),
                  "[image] huge.png: 100000x100000 pixels is larger than the limit of 268435456");
  // Within the limit, but more than a file of its size can hold: refused before allocating.
  auto tall = png;
  const std::uint32_t dims[2] = {4096, 8192};
  for (int k = 0; k < 2; ++k)
    for (int b = 0; b < 4; ++b)
      tall[static_cast<std::size_t>(16 + 4 * k + b)] =
          static_cast<std::uint8_t>(dims[k] >> (24 - 8 * b));
  const auto crc2 = crc32(0, tall.data() + 12, 17);
  for (int b = 0; b < 4; ++b)
    tall[static_cast<std::size_t>(29 + b)] = static_cast<std::uint8_t>(crc2 >> (24 - 8 * b));
  EXPECT_CONTAINS(error_of([&] { decode_image(tall, 3, "tall.png"); }),
                  "its header says 4096x8192 pixels, more than");
  EXPECT_CONTAINS(error_of([&] { decode_image_file(dir.path() / "missing.png", 3); }),
                  "missing.png: cannot be read");
}

// PIL's bilinear resize with antialias, computed by hand for 4 -> 2: output 0 is centred at input
// 1.0 with support 2: inputs 0, 1, 2 at weights 0.75, 0.75, 0.25 (/ 1.75); output 1 at 3.0:
// inputs 1, 2, 3 at 0.25, 0.75, 0.75. Row [0, 100, 200, 255] -> [71.4, 209.3] -> [71, 209].
TEST(ImageDecode, ResizeIsPilsAntialiasedBilinear) {
  DecodedImage img;
  img.width = 4;
  img.height = 1;
  img.channels = 1;
  img.pixels = {0, 100, 200, 255};
  EXPECT_EQ(resize_to_planes(img, 1, 2), (std::vector<std::uint8_t>{71, 209}));
  // Same size: only the layout changes (HWC -> CHW).
  DecodedImage rgb;
  rgb.width = 2;
  rgb.height = 1;
  rgb.channels = 3;
  rgb.pixels = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(resize_to_planes(rgb, 1, 2), (std::vector<std::uint8_t>{1, 4, 2, 5, 3, 6}));
  // A constant image stays constant at any size.
  DecodedImage flat;
  flat.width = 7;
  flat.height = 5;
  flat.channels = 1;
  flat.pixels.assign(35, 90);
  EXPECT_EQ(resize_to_planes(flat, 3, 11), std::vector<std::uint8_t>(33, 90));
}

TEST(ImageFolder, ClassesSplitsAndNormalisation) {
  const tb::test::TempDir dir("tb_image_folder");
  // Classes "cat" and "dog" (sorted: cat = 0), 5 images each, PNG and JPEG mixed; a text file
  // and a hidden file are skipped.
  for (const char* cls : {"dog", "cat"}) {
    fs::create_directories(dir.path() / cls);
    for (int i = 0; i < 5; ++i) {
      const auto rgb = pattern(8, 6, std::string(cls) == "cat" ? 10 * i : 100 + 10 * i);
      if (i % 2 == 0)
        write_png(dir.path() / cls / ("img" + std::to_string(i) + ".png"), 8, 6, rgb);
      else
        write_jpeg(dir.path() / cls / ("img" + std::to_string(i) + ".JPG"), 8, 6, rgb);
    }
    std::ofstream(dir.path() / cls / "notes.txt") << "not an image";
    std::ofstream(dir.path() / cls / ".hidden.png") << "not an image";
  }
  EXPECT_EQ(image_folder_classes(dir.path()), (std::vector<std::string>{"cat", "dog"}));
  ImageFolderOptions o;
  o.dir = dir.path();
  o.height = 3;
  o.width = 4;
  o.val_fraction = 0.2;  // the last image of each class (by name)
  o.image.augment.horizontal_flip = true;
  const ImageFolderSplits s = load_image_folder(o);
  ASSERT_EQ(s.train->size(), 8);
  ASSERT_EQ(s.eval->size(), 2);
  EXPECT_EQ(s.train->channels(), 3);
  EXPECT_EQ(s.train->height(), 3);
  EXPECT_EQ(s.train->width(), 4);
  const auto* train_labels = s.train->labels().data_ptr<std::int64_t>();
  EXPECT_EQ(std::vector<std::int64_t>(train_labels, train_labels + 8),
            (std::vector<std::int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  const auto* eval_labels = s.eval->labels().data_ptr<std::int64_t>();
  EXPECT_EQ(eval_labels[0], 0);
  EXPECT_EQ(eval_labels[1], 1);
  // The held-out image is img4.png of each class, resized as the decoder and resize give it.
  const auto expected =
      resize_to_planes(decode_image_file(dir.path() / "cat" / "img4.png", 3), 3, 4);
  const auto* raw = s.eval->raw_images().data_ptr<std::uint8_t>();
  EXPECT_EQ(std::vector<std::uint8_t>(raw, raw + 36), expected);
  // Normalised with the training split's per-channel statistics: each channel's inputs have
  // mean 0 and standard deviation 1 over the training images (augmentation off for the check).
  EXPECT_TRUE(s.train->options().augment.horizontal_flip);
  EXPECT_FALSE(s.eval->options().augment.enabled());
  ImageDatasetOptions plain = s.train->options();
  plain.augment = ImageAugment{};
  const ImageDataset check("check", s.train->raw_images(), s.train->labels(), 2, plain);
  std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const Batch b = check.get_batch(all, BatchContext{});
  const auto* in = b.input.data_ptr<float>();
  for (int c = 0; c < 3; ++c) {
    double sum = 0, sq = 0;
    for (int i = 0; i < 8; ++i)
      for (int p = 0; p < 12; ++p) {
        const double v = in[i * 36 + c * 12 + p];
        sum += v;
        sq += v * v;
      }
    EXPECT_NEAR(sum / 96, 0.0, 1e-5) << c;
    EXPECT_NEAR(sq / 96, 1.0, 1e-4) << c;
  }
  // A validation folder instead of the fraction: the same classes are required.
  const tb::test::TempDir val("tb_image_folder_val");
  fs::create_directories(val.path() / "cat");
  write_png(val.path() / "cat" / "v.png", 8, 6, pattern(8, 6, 1));
  o.val_dir = val.path();
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }),
                  ": data.val_path must hold the same class folders as " + dir.path().string() +
                      "; missing: dog");
  fs::create_directories(val.path() / "dogs");  // a renamed folder: both sides named
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }),
                  "; missing: dog; not in data.path: dogs");
}

// Subfolders of a class are read as torchvision's ImageFolder reads them (os.walk: a folder's
// files by name, then its subfolders'), where they were skipped without a word; other files are
// left out and said so in the run's notes, with the images per class.
TEST(ImageFolder, SubfoldersAreReadAndWhatIsLeftOutIsSaid) {
  const tb::test::TempDir dir("tb_image_folder_nested");
  for (const char* c : {"cat", "dog"}) {
    fs::create_directories(dir.path() / c / "more");
    fs::create_directories(dir.path() / c / ".hidden");
    for (const char* f : {"b.png", "z.png", "more/a.png", ".hidden/h.png"})
      write_png(dir.path() / c / f, 4, 4, pattern(4, 4, 3));
  }
  std::ofstream(dir.path() / "cat" / "anim.gif") << "GIF89a";
  write_png(dir.path() / "stray.png", 4, 4, pattern(4, 4, 1));  // beside the class folders
  std::vector<fs::path> skipped;
  const auto files = image_folder_files(dir.path() / "cat", &skipped);
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].filename(), "b.png");
  EXPECT_EQ(files[1].filename(), "z.png");
  EXPECT_EQ(files[2], dir.path() / "cat" / "more" / "a.png");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].filename(), "anim.gif");
  const auto kind = dataset_registry().at("image-folder");
  nlohmann::json d = {{"path", dir.path().string()}, {"size", 4}, {"val_fraction", 0.34}};
  const DataSplits splits = kind->make(d, 0);
  EXPECT_EQ(splits.train->size() + splits.eval->size(), 6);
  ASSERT_EQ(splits.notes.size(), 3u);
  EXPECT_CONTAINS(splits.notes[0], ": 2 classes, 4 images to train, 2 to validate (cat 3, dog 3)");
  EXPECT_CONTAINS(splits.notes[1], "left out 1 file that is not a .png, .jpg or .jpeg image (");
  EXPECT_CONTAINS(splits.notes[1], "anim.gif)");
  EXPECT_EQ(splits.notes[2],
            "image-folder: left out 1 file outside the class folders (an image belongs in "
            "DIR/CLASS/): " +
                (dir.path() / "stray.png").string());
}

TEST(ImageFolder, ErrorsNameTheFolderOrFile) {
  const tb::test::TempDir dir("tb_image_folder_bad");
  ImageFolderOptions o;
  o.dir = dir.path() / "nope";
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }), "nope is not a folder");
  o.dir = dir.path();
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }), "has no class subfolders");
  fs::create_directories(dir.path() / "a");
  fs::create_directories(dir.path() / "b");
  write_png(dir.path() / "a" / "1.png", 4, 4, pattern(4, 4, 0));
  write_png(dir.path() / "a" / "2.png", 4, 4, pattern(4, 4, 1));
  o.val_fraction = 0.5;
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }),
                  "(class b) has no .png, .jpg or .jpeg images, in it or its subfolders");
  write_png(dir.path() / "b" / "1.png", 4, 4, pattern(4, 4, 2));
  std::ofstream(dir.path() / "b" / "2.png") << "GIF89a, really";
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }),
                  "2.png: not a PNG or JPEG file (it starts with 47 49 46 38 39 61");
  fs::remove(dir.path() / "b" / "2.png");
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }), "leaves none to train on");
  write_png(dir.path() / "b" / "2.png", 4, 4, pattern(4, 4, 3));
  o.val_fraction = 0.1;
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }), "holds out no image");
  o.val_fraction = 0.5;
  EXPECT_EQ(load_image_folder(o).train->size(), 2);
  o.max_bytes = 10;
  EXPECT_CONTAINS(error_of([&] { load_image_folder(o); }), "more than the limit of 10");
}

// A run config's check (the data kind's shape, read before a run is created): a class folder
// without images is named there rather than taken for a wrong model.classes, and a folder of one
// class — which a classifier learns nothing from — is refused.
TEST(ImageFolder, TheConfigCheckNamesAnEmptyClassAndRefusesASingleOne) {
  const tb::test::TempDir dir("tb_image_folder_shape");
  for (const char* c : {"blue", "red"}) {
    fs::create_directories(dir.path() / "two" / c);
    for (int i = 0; i < 2; ++i)
      write_png(dir.path() / "two" / c / (std::to_string(i) + ".png"), 4, 4, pattern(4, 4, i));
  }
  fs::create_directories(dir.path() / "two" / "yellow");
  fs::create_directories(dir.path() / "one" / "only");
  write_png(dir.path() / "one" / "only" / "0.png", 4, 4, pattern(4, 4, 0));
  const std::string config =
      "[model]\nkind = \"mlp\"\ninput = 48\nhidden = [8]\nclasses = "
      "3\n[data]\nkind = \"image-folder\"\nsize = [4, 4]\npath = \"";
  EXPECT_CONTAINS(error_of([&] {
                    (void)tb::train::parse_run_config(
                        config + (dir.path() / "two").string() + "\"\n", "img.toml");
                  }),
                  (dir.path() / "two" / "yellow").string() +
                      " (class yellow) has no .png, .jpg or .jpeg images");
  EXPECT_CONTAINS(error_of([&] {
                    (void)tb::train::parse_run_config(
                        config + (dir.path() / "one").string() + "\"\n", "img.toml");
                  }),
                  (dir.path() / "one").string() +
                      " has one class folder (only): a classifier needs two or more");
  fs::remove(dir.path() / "two" / "yellow");
  EXPECT_EQ(tb::train::parse_run_config(config + (dir.path() / "two").string() + "\"\n", "img.toml",
                                        {"model.classes=2"})
                .model.kind,
            "mlp");
}

// A run config with data.kind = "image-folder" trains a small CNN through the TOML path: two
// classes told apart by colour (red-ish and blue-ish noise), learnt to full accuracy.
TEST(ImageFolder, TrainsACnnFromARunConfig) {
  const tb::test::TempDir dir("tb_image_folder_run");
  std::uint32_t state = 7;
  auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 24; };
  for (int c = 0; c < 2; ++c) {
    const fs::path cls = dir.path() / (c == 0 ? "blue" : "red");
    fs::create_directories(cls);
    for (int i = 0; i < 20; ++i) {
      std::vector<std::uint8_t> rgb(10 * 10 * 3);
      for (std::size_t p = 0; p < rgb.size(); p += 3) {
        rgb[p + (c == 0 ? 2 : 0)] = static_cast<std::uint8_t>(150 + next() % 100);
        rgb[p + 1] = static_cast<std::uint8_t>(next() % 100);
        rgb[p + (c == 0 ? 0 : 2)] = static_cast<std::uint8_t>(next() % 100);
      }
      if (i % 2)
        write_jpeg(cls / ("i" + std::to_string(i) + ".jpg"), 10, 10, rgb);
      else
        write_png(cls / ("i" + std::to_string(i) + ".png"), 10, 10, rgb);
    }
  }
  const std::string toml = R"(
[run]
steps = 30
seed = 2
[model]
kind = "cnn"
input = [3, 8, 8]
channels = [4]
classes = 2
[data]
kind = "image-folder"
path = ")" + dir.path().string() +
                           R"("
size = [8, 8]
val_fraction = 0.2
batch_size = 8
workers = 1
random_flip = true
[optimizer]
kind = "adamw"
lr = 0.01
[eval]
interval = 30
)";
  // The steps-per-epoch count previews use comes from the listing: 2 x (20 - 4) images.
  const auto kind = tb::data::dataset_registry().at("image-folder");
  EXPECT_EQ(
      tb::data::train_samples(*kind, {{"path", dir.path().string()}, {"val_fraction", 0.2}}, 0),
      32);
  tb::train::Trainer t(tb::train::parse_run_config(toml, "image-folder.toml"));
  const auto r = t.run();
  ASSERT_EQ(r.outcome, tb::train::RunOutcome::kFinished) << r.message;
  double accuracy = -1;
  for (const auto& [k, v] : r.last_eval)
    if (k == "eval.accuracy") accuracy = v;
  EXPECT_EQ(accuracy, 1.0);
}
