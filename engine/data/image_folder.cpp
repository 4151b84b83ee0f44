// Image folders (see image_folder.h).
#include "engine/data/image_folder.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <exception>
#include <iterator>
#include <mutex>
#include <system_error>
#include <thread>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/data/image_decode.h"

namespace tb::data {
namespace {

struct Item {
  std::filesystem::path file;
  std::int64_t label = 0;
};

bool image_extension(const std::filesystem::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

// Decodes and resizes `items` into uint8 [N, C, H, W] with `threads` threads; the first error
// (by item order) is rethrown.
core::Tensor decode_all(const std::vector<Item>& items, const ImageFolderOptions& o) {
  const auto n = static_cast<std::int64_t>(items.size());
  const std::int64_t per = o.channels * o.height * o.width;
  TB_CHECK(per > 0 && n <= o.max_bytes / per, "[image-folder] ", o.dir.string(), ": ", n,
           " images of ", o.channels, "x", o.height, "x", o.width, " take ", n * per,
           " bytes decoded, more than the limit of ", o.max_bytes,
           "; choose a smaller data.size or fewer images");
  core::Tensor images =
      core::Tensor::empty({n, o.channels, o.height, o.width}, core::ScalarType::UInt8);
  auto* dst = images.data_ptr<std::uint8_t>();
  int threads = o.threads > 0 ? o.threads : core::default_num_threads();
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::int64_t>(n, 1))));
  std::atomic<std::int64_t> next{0};
  std::mutex m;
  std::int64_t error_at = n;
  std::exception_ptr error;
  auto work = [&] {
    for (std::int64_t i = next++; i < n; i = next++) {
      try {
        const DecodedImage img =
            decode_image_file(items[static_cast<std::size_t>(i)].file, o.channels);
        const std::vector<std::uint8_t> planes = resize_to_planes(img, o.height, o.width);
        std::copy(planes.begin(), planes.end(), dst + i * per);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (i < error_at) {
          error_at = i;
          error = std::current_exception();
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));  // no allocation once threads run
  for (int t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {  // no more threads to be had (a process limit): the
      break;                              // ones started and this one decode every image
    }
  }
  work();
  for (auto& t : pool)
    t.join();
  if (error) std::rethrow_exception(error);
  return images;
}

std::shared_ptr<ImageDataset> dataset_of(const std::vector<Item>& items,
                                         const ImageFolderOptions& o, std::int64_t classes,
                                         const ImageDatasetOptions& image) {
  core::Tensor labels =
      core::Tensor::empty({static_cast<std::int64_t>(items.size())}, core::ScalarType::Int64);
  auto* lab = labels.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < items.size(); ++i)
    lab[i] = items[i].label;
  return std::make_shared<ImageDataset>("image-folder", decode_all(items, o), labels, classes,
                                        image);
}

}  // namespace

std::vector<std::string> image_folder_classes(const std::filesystem::path& dir,
                                              const std::string& key) {
  std::error_code ec;
  TB_CHECK(std::filesystem::is_directory(dir, ec), "[image-folder] ", dir.string(),
           " is not a folder (", key, ": a folder with one subfolder of images per class)");
  std::vector<std::string> classes;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec) && !name.empty() && name[0] != '.') classes.push_back(name);
  }
  TB_CHECK(!ec, "[image-folder] ", dir.string(), ": cannot be listed: ", ec.message());
  TB_CHECK(!classes.empty(), "[image-folder] ", dir.string(),
           " has no class subfolders (expected DIR/CLASS/IMAGE.png|jpg)");
  std::sort(classes.begin(), classes.end());
  return classes;
}

namespace {

// Visits the files under `class_dir` (subfolders too, links followed; hidden files and folders
// left out) with on_file(entry, is_image) until it returns false; a listing error is a
// tb::ValueError naming the folder.
template <typename OnFile>
void walk_class_folder(const std::filesystem::path& class_dir, OnFile&& on_file) {
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(
      class_dir, std::filesystem::directory_options::follow_directory_symlink, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::filesystem::directory_entry& e = *it;
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.') {
      if (e.is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it.depth() > 32) it.disable_recursion_pending();  // a link loop
    if (e.is_directory(ec)) continue;
    if (!on_file(e, e.is_regular_file(ec) && image_extension(e.path()))) return;
  }
  TB_CHECK(!ec, "[image-folder] ", class_dir.string(), ": cannot be listed: ", ec.message());
}

}  // namespace

bool image_folder_has_image(const std::filesystem::path& class_dir) {
  bool found = false;
  walk_class_folder(class_dir, [&](const std::filesystem::directory_entry&, bool image) {
    found = image;
    return !found;
  });
  return found;
}

std::vector<std::filesystem::path> image_folder_files(const std::filesystem::path& class_dir,
                                                      std::vector<std::filesystem::path>* skipped) {
  // As torchvision's ImageFolder finds them (datasets/folder.py, make_dataset: os.walk with
  // followlinks, sorted): subfolders too, each folder's files in name order before the
  // subfolders' (here: by folder, then name). Hidden files and folders are left out.
  std::vector<std::pair<std::filesystem::path, std::string>> found;  // (folder, name)
  walk_class_folder(class_dir, [&](const std::filesystem::directory_entry& e, bool image) {
    if (image)
      found.emplace_back(e.path().parent_path(), e.path().filename().string());
    else if (skipped != nullptr)
      skipped->push_back(e.path());  // another kind of file, a dangling link, a FIFO
    return true;
  });
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> files;
  files.reserve(found.size());
  for (const auto& [folder, name] : found)
    files.push_back(folder / name);
  return files;
}

ImageFolderSplits load_image_folder(const ImageFolderOptions& o) {
  TB_CHECK(o.channels == 1 || o.channels == 3, "[image-folder] data.channels must be 1 or 3, got ",
           o.channels);
  TB_CHECK(o.height >= 1 && o.width >= 1, "[image-folder] data.size must be two sizes >= 1, got ",
           o.height, "x", o.width);
  ImageFolderSplits s;
  s.classes = image_folder_classes(o.dir);
  // Files beside the class folders belong to no class (torchvision's ImageFolder skips them
  // too): left out, and said.
  for (const auto& top : {o.dir, o.val_dir}) {
    if (top.empty()) continue;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(top, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && !e.is_directory(ec)) s.outside.push_back(e.path());
    }
  }
  std::sort(s.outside.begin(), s.outside.end());
  const auto classes = static_cast<std::int64_t>(s.classes.size());
  std::vector<Item> train, val;
  for (std::int64_t c = 0; c < classes; ++c) {
    const auto files =
        image_folder_files(o.dir / s.classes[static_cast<std::size_t>(c)], &s.skipped);
    TB_CHECK(!files.empty(), "[image-folder] ",
             (o.dir / s.classes[static_cast<std::size_t>(c)]).string(), " (class ",
             s.classes[static_cast<std::size_t>(c)],
             ") has no .png, .jpg or .jpeg images, in it or its subfolders");
    s.per_class.push_back(static_cast<std::int64_t>(files.size()));
    std::size_t held = 0;
    if (o.val_dir.empty()) {
      TB_CHECK(o.val_fraction > 0.0 && o.val_fraction < 1.0,
               "[image-folder] data.val_fraction must be in (0, 1) without data.val_path, got ",
               o.val_fraction);
      held = static_cast<std::size_t>(
          std::floor(o.val_fraction * static_cast<double>(files.size()) + 0.5));
      TB_CHECK(held < files.size(), "[image-folder] class ", s.classes[static_cast<std::size_t>(c)],
               " has ", files.size(), " images: data.val_fraction ", o.val_fraction,
               " leaves none to train on");
    }
    for (std::size_t i = 0; i < files.size(); ++i)
      (i + held < files.size() ? train : val).push_back({files[i], c});
  }
  if (!o.val_dir.empty()) {
    const auto val_classes = image_folder_classes(o.val_dir, "data.val_path");
    if (val_classes != s.classes) {
      // Which ones: a class missing from one side or the other (a renamed folder shows as both).
      std::vector<std::string> only_train, only_val;
      std::set_difference(s.classes.begin(), s.classes.end(), val_classes.begin(),
                          val_classes.end(), std::back_inserter(only_train));
      std::set_difference(val_classes.begin(), val_classes.end(), s.classes.begin(),
                          s.classes.end(), std::back_inserter(only_val));
      auto list = [](const std::vector<std::string>& v) {
        std::string out;
        for (std::size_t i = 0; i < v.size() && i < 8; ++i)
          out += (i ? ", " : "") + v[i];
        return v.size() > 8 ? out + ", ..." : out;
      };
      throw ValueError("[image-folder] " + o.val_dir.string() +
                       ": data.val_path must hold the same class folders as " + o.dir.string() +
                       (only_train.empty() ? "" : "; missing: " + list(only_train)) +
                       (only_val.empty() ? "" : "; not in data.path: " + list(only_val)));
    }
    for (std::int64_t c = 0; c < classes; ++c)
      for (const auto& f :
           image_folder_files(o.val_dir / s.classes[static_cast<std::size_t>(c)], &s.skipped))
        val.push_back({f, c});
    TB_CHECK(!val.empty(), "[image-folder] ", o.val_dir.string(), " has no images");
  }
  TB_CHECK(!val.empty(), "[image-folder] ", o.dir.string(), ": data.val_fraction ", o.val_fraction,
           " holds out no image (too few per class); raise it or give data.val_path");
  ImageDatasetOptions image = o.image;
  s.train = dataset_of(train, o, classes, ImageDatasetOptions{false, {}, {}, {}});
  if (image.normalize && image.mean.empty() && image.std.empty()) {
    // The training split's per-channel mean and standard deviation of x / 255.
    const auto* px = s.train->raw_images().data_ptr<std::uint8_t>();
    const std::int64_t n = s.train->size(), plane = o.height * o.width;
    for (std::int64_t k = 0; k < o.channels; ++k) {
      double sum = 0, sq = 0;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t p = 0; p < plane; ++p) {
          const double v = px[(i * o.channels + k) * plane + p] / 255.0;
          sum += v;
          sq += v * v;
        }
      const double count = static_cast<double>(n * plane);
      const double mean = sum / count;
      const double var = std::max(sq / count - mean * mean, 0.0);
      image.mean.push_back(static_cast<float>(mean));
      image.std.push_back(static_cast<float>(var > 0 ? std::sqrt(var) : 1.0));
    }
  }
  s.train = std::make_shared<ImageDataset>("image-folder", s.train->raw_images(), s.train->labels(),
                                           classes, image);
  image.augment = ImageAugment{};  // evaluation sees the images as they are
  s.eval = dataset_of(val, o, classes, image);
  return s;
}

}  // namespace tb::data
