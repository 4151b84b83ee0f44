// Helpers shared by the Qt tests: fast configs and temporary stores.
#pragma once

#include <QApplication>
#include <QFile>
#include <QMessageBox>
#include <QPushButton>
#include <QString>
#include <QTemporaryDir>
#include <QTimer>

#include <exception>

#include "engine/api/workbench_api.h"

namespace tb::test {

/// Writes `text` (UTF-8) to `path`, replacing it; false when the file cannot be written.
inline bool writeFile(const QString& path, const QString& text) {
  QFile f(path);
  return f.open(QIODevice::WriteOnly | QIODevice::Truncate) &&
         f.write(text.toUtf8()) == text.toUtf8().size();
}

/// A run config that trains in well under a second (4 Gaussian blobs, a small MLP).
inline QString blobsConfig(int steps = 40, const QString& name = QStringLiteral("blobs"),
                           double lr = 0.01, const QString& optimizer = QStringLiteral("adamw")) {
  return QStringLiteral(
             "[run]\nname = \"%1\"\nseed = 3\nsteps = %2\n\n"
             "[model]\nkind = \"mlp\"\ninput = 16\nhidden = [32]\nclasses = 4\n\n"
             "[data]\nkind = \"synthetic-blobs\"\nbatch_size = 32\nworkers = 0\n\n"
             "[optimizer]\nkind = \"%4\"\nlr = %3\n\n"
             "[eval]\ninterval = 10\n")
      .arg(QString(name)
               .replace(QLatin1Char('\\'), QStringLiteral("\\\\"))
               .replace(QLatin1Char('"'), QStringLiteral("\\\"")))
      .arg(steps)
      .arg(lr)
      .arg(optimizer);
}

/// How many runs of the store at `db` are running and past step `step` (0 while the store or
/// its runs do not exist yet).
inline int runsTrainingPast(const QString& db, std::int64_t step) {
  int n = 0;
  try {
    for (const auto& r : api::StoreReader(db.toStdString()).runs())
      n += r.status == "running" && r.last_step && *r.last_step >= step;
  } catch (const std::exception&) {  // not created yet
  }
  return n;
}

/// Answers Yes to the question the next event-loop turn shows (a window asking before it quits).
inline void answerYesSoon() {
  QTimer::singleShot(0, [] {
    if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget()))
      box->button(QMessageBox::Yes)->click();
  });
}

}  // namespace tb::test
