// The report of a sweep: its summary (method, metric, early stopping), the points best first,
// the metric against each swept key and the parallel-coordinates plot (as SweepView draws them),
// every trial, and the best points' configs — as the run reports are: one self-contained HTML
// file or a landscape-A4 PDF (writeReport). Used by the Sweeps tab's Export and by
// `trainbench --export-sweep-report NAME -o FILE` (offscreen).
#pragma once

#include <QString>

#include "engine/api/workbench_api.h"
#include "ui/report/report.h"

namespace tb::ui {

/// What a sweep report holds.
struct SweepReportOptions {
  int bestConfigs = 3;   ///< configs of the best points' best trials
  int plotWidth = 900;   ///< plot image size (pixels)
  int plotHeight = 420;  ///< plot image size (pixels)
};

/// Builds the report of sweep `name` of `store` (an unknown sweep throws tb::ValueError naming
/// the store's sweeps). Needs a QApplication (plots render offscreen).
Report buildSweepReport(const api::StoreReader& store, const QString& name,
                        const SweepReportOptions& options = {});

}  // namespace tb::ui
