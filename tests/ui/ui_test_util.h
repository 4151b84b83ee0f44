// Helpers shared by the Qt tests: fast configs and temporary stores.
#pragma once

#include <QString>
#include <QTemporaryDir>

namespace tb::test {

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

}  // namespace tb::test
