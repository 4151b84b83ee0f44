// Fixture for the no-Qt build check: an engine file that includes a Qt header.
#include <QtCore/QString>
