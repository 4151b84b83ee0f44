// Legend columns that fit: whole item names in as many columns as the width holds.
#pragma once

class QCPLegend;

namespace tb::ui {

/// Sets `legend` (filled columns first) to as many columns as whole items fit side by side in
/// `room` px, from 1 to `most` (`most` when it has no items); a cut name ("#1 eval accu") reads
/// worse than a taller legend. Returns whether the number of columns changed (then replot).
bool fitLegendColumns(QCPLegend* legend, int room, int most);

}  // namespace tb::ui
